"""TTL: a task not started within its ttl becomes EXPIRED and never runs."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import dtq
from dtq.engine.scheduler import Scheduler
from tests.ops_support import claim_by_hand, events, keys, orphans
from tests.testapp import tasks


def test_expired_at_claim_never_runs(dtq_env):
    late = tasks.record.using(ttl=0.2).enqueue("late")
    fresh = tasks.record.using(ttl=60).enqueue("fresh")
    time.sleep(0.3)
    assert [c["id"] for c in claim_by_hand(n=2)] == [fresh.id]
    late.refresh()
    assert late.state == dtq.TaskState.EXPIRED
    assert late.attempt == 0
    assert [e["task"] for e in events(dtq_env.client, "TASK_EXPIRED")] == [late.id]
    assert dtq_env.stats()["expired"] == 1
    assert orphans(dtq_env.client) == []


@pytest.mark.slow
def test_expired_task_is_never_run_by_a_worker(dtq_env):
    result = tasks.record.using(ttl=0.2).enqueue("late")
    time.sleep(0.3)
    assert dtq_env.worker("--burst").wait(30) == 0
    result.refresh()
    assert result.state == dtq.TaskState.EXPIRED
    assert dtq_env.witnessed("record") == []


def test_expired_at_promotion_is_never_queued(dtq_env):
    # The ttl counts from the run time: due after 0.2 s, expired 0.1 s later.
    result = tasks.record.using(run_after=timedelta(seconds=0.2), ttl=0.1).enqueue()
    time.sleep(0.4)
    Scheduler().run_once()
    result.refresh()
    assert result.state == dtq.TaskState.EXPIRED
    assert dtq_env.client.zcard(keys().schedule) == 0
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == 0
    assert dtq_env.stats()["active"] == 0


def test_delayed_task_within_its_ttl_is_promoted(dtq_env):
    result = tasks.record.using(run_after=timedelta(seconds=0.1), ttl=30).enqueue()
    time.sleep(0.2)
    Scheduler().run_once()
    result.refresh()
    assert result.state == dtq.TaskState.QUEUED


def test_expiry_at_claim_settles_the_idempotency_key(dtq_env):
    # Regression: the worker's claim did not know the key, so claim.lua wrote the outcome into
    # the task record itself ('state' = 'failed') and left the key 'processing' for good.
    result = tasks.record.using(ttl=0.1, idempotency_key="exp-1").enqueue()
    time.sleep(0.2)
    assert claim_by_hand() == []
    result.refresh()
    assert result.state == dtq.TaskState.EXPIRED
    idem = keys().idempotency("tests", "exp-1")
    assert dtq_env.client.hget(idem, "state") == "failed"
    assert dtq_env.client.ttl(idem) > 0
    again = tasks.record.using(ttl=0.1, idempotency_key="exp-1").enqueue()
    assert (again.id, again.duplicate) == (result.id, True)
