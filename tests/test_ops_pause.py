"""Pause and resume: workers read nothing from a paused queue; submissions still land."""

from __future__ import annotations

import time

import pytest

import dtq
from dtq.engine import ops
from dtq.engine.errors import InvalidOperation
from dtq.engine.reaper import Reaper
from dtq.models import AuditEntry
from tests.ops_support import ACTOR, claim_by_hand, events, keys
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_pause_and_resume_are_idempotent_evented_and_audited(dtq_env):
    assert ops.pause_queue("tests", actor=ACTOR, reason="deploy") is True
    assert ops.pause_queue("tests", actor=ACTOR) is False
    assert dtq_env.client.sismember(keys().paused, "tests")
    assert ops.resume_queue("tests", actor=ACTOR) is True
    assert ops.resume_queue("tests", actor=ACTOR) is False
    assert not dtq_env.client.sismember(keys().paused, "tests")
    assert [e["reason"] for e in events(dtq_env.client, "QUEUE_PAUSED")] == ["deploy"]
    assert len(events(dtq_env.client, "QUEUE_RESUMED")) == 1
    rows = list(AuditEntry.objects.order_by("id").values_list("action", "affected", "outcome"))
    assert rows == [
        ("pause", 1, "ok"),
        ("pause", 0, "ok"),
        ("resume", 1, "ok"),
        ("resume", 0, "ok"),
    ]
    assert AuditEntry.objects.filter(queue="tests").count() == 4


def test_paused_queue_accepts_submissions_but_gives_workers_nothing(dtq_env):
    ops.pause_queue("tests", actor=ACTOR)
    result = tasks.record.enqueue(1)
    result.refresh()
    assert result.state == dtq.TaskState.QUEUED
    assert claim_by_hand() == []
    ops.resume_queue("tests", actor=ACTOR)
    assert [c["id"] for c in claim_by_hand()] == [result.id]


def test_invalid_queue_name_is_refused(dtq_env):
    with pytest.raises(InvalidOperation, match="invalid queue name"):
        ops.pause_queue("no spaces", actor=ACTOR)
    assert AuditEntry.objects.get().outcome == "refused"


@pytest.mark.slow
def test_worker_skips_a_paused_queue_until_resumed(dtq_env):
    results = [tasks.record.enqueue(i) for i in range(5)]
    ops.pause_queue("tests", actor=ACTOR)
    assert dtq_env.worker("--burst").wait(30) == 0  # nothing readable: a burst worker exits
    assert dtq_env.witnessed("record") == []
    ops.resume_queue("tests", actor=ACTOR)
    assert dtq_env.worker("--burst").wait(30) == 0
    assert len(dtq_env.witnessed("record")) == 5
    for r in results:
        r.refresh()
        assert r.state == dtq.TaskState.SUCCEEDED


def test_reclaimed_entries_wait_in_a_paused_queue(dtq_env):
    result = tasks.record.enqueue()
    claim_by_hand(worker="ghost")
    ops.pause_queue("tests", actor=ACTOR)
    time.sleep(dtq_env.settings.DTQ["LEASE_TIMEOUT"] + 0.1)  # the ghost's lease runs out
    assert Reaper().reclaim_expired_leases() == 1
    result.refresh()
    assert result.state == dtq.TaskState.QUEUED
    assert claim_by_hand() == []  # the same read.lua a worker uses
    ops.resume_queue("tests", actor=ACTOR)
    (claimed,) = claim_by_hand()
    assert (claimed["id"], claimed["attempt"]) == (result.id, 2)
