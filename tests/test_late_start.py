"""A handler never starts on a lease that ran out or was lost; a lost lease stops a running one."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import pytest
from redis.exceptions import ResponseError

import dtq
from dtq.engine import clock, failpoints, layout
from dtq.engine.connection import get_client
from dtq.engine.executor import Attempt, run_sync_attempt, skipped
from dtq.engine.keys import GROUP
from dtq.engine.read_side import get_task
from dtq.views import timeline
from tests.conftest import Env, wait_for
from tests.script_calls import Scripts
from tests.test_handler_exits import attempt_of, context_of
from tests.testapp import django_tasks as dj
from tests.testapp import tasks

# Handlers run in this process close stale database connections first (_run_sync), which
# pytest-django allows only with database access.
pytestmark = pytest.mark.django_db

SETTLED = {"pending": 0, "running": 0, "schedule": 0}
FREEZE = "worker.before_handler@1:freeze=3"  # twice the tests' 1.5 s lease


def finished(result: Any) -> Any:
    def check() -> bool:
        return dtq.TaskResult.load(result.id).is_finished

    return check


# ----- the check itself (in this process) -------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "late", "reason"),
    [(False, True, "lease_expired"), (True, False, "lease_lost")],
)
def test_a_late_or_lost_attempt_is_skipped_without_calling_the_handler(
    dtq_env: Env, monkeypatch: pytest.MonkeyPatch, lost: bool, late: bool, reason: str
) -> None:
    monkeypatch.setenv("DTQ_WITNESS", str(dtq_env.witness_path))
    att = attempt_of(tasks.record, "x")
    att.lost = lost
    att.lease_until = clock.now() - 0.001 if late else clock.now() + 60

    outcome = run_sync_attempt(att, "w-test", context_of(att))

    assert (outcome.kind, outcome.data, att.began) == ("skip", reason, False)
    assert dtq_env.witnessed("record") == []


def test_an_attempt_within_its_lease_runs(dtq_env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DTQ_WITNESS", str(dtq_env.witness_path))
    att = attempt_of(tasks.record, "x")
    att.lease_until = clock.now() + 60

    outcome = run_sync_attempt(att, "w-test", context_of(att))

    assert (outcome.kind, att.began, len(dtq_env.witnessed("record"))) == ("success", True, 1)


def test_failpoint_specs_parse_kills_and_freezes() -> None:
    spec = "worker.after_claim@3, worker.before_handler@2:freeze=1.5"
    assert failpoints._parse(spec) == {
        "worker.after_claim": (3, 0.0),
        "worker.before_handler": (2, 1.5),
    }
    with pytest.raises(ValueError, match="only mode"):
        failpoints._parse("worker.before_handler:sleep=1")
    with pytest.raises(ValueError, match="unknown failpoint"):
        failpoints._parse("worker.nowhere")


# ----- skip.lua ---------------------------------------------------------------------------


def claim_one(env: Env, worker: str) -> Attempt:
    """Read and claim the one entry of the tests queue's normal band, as a worker does."""
    stream = env.keys.stream("tests", 1)
    with contextlib.suppress(ResponseError):  # BUSYGROUP: created by an earlier claim
        env.client.xgroup_create(stream, GROUP, "0", mkstream=True)
    [(_, [(eid, fields)])] = env.client.xreadgroup(GROUP, worker, {stream: ">"})
    refs = [layout.TaskRef(fields["t"], "tests")]
    keys, argv = layout.build(env.keys, ["tests"], refs, layout=layout.of("claim"))
    row = Scripts.of(get_client()).claim(keys=keys, args=[*argv, worker, 3000, 1, 1, eid])
    att = attempt_of(tasks.record, "x")
    att.id, att.entry, att.attempt = row[0], row[1], int(row[6])
    return att


def skip(env: Env, worker: str, att: Attempt, outcome_json: str) -> list[int]:
    """Call skip.lua the way the worker does for one attempt of the tests queue."""
    keys, argv = layout.build(env.keys, ["tests"], [layout.TaskRef(att.id, "tests")])
    args = [*argv, worker, 1, 1, att.entry, att.attempt, "lease_expired", outcome_json]
    return list(Scripts.of(get_client()).skip(keys=keys, args=args))


def test_skip_gives_back_an_attempt_still_ours_and_a_resend_writes_nothing(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    att = claim_one(dtq_env, "w1")
    entry = skipped(att, "w1", "lease_expired").history

    assert skip(dtq_env, "w1", att, entry) == [1]
    assert skip(dtq_env, "w1", att, entry) == [2]  # the same call again: its reply was lost
    record = get_task(result.id)
    assert record is not None
    assert (record["state"], record["attempt"], record["history"] or []) == ("QUEUED", 0, [])
    assert [s["reason"] for s in record["skips"]] == ["lease_expired"]
    assert record["delivery"] != att.entry
    [event] = dtq_env.events("TASK_START_SKIPPED")
    assert (event["state"], event["attempt"], event["given_back"]) == ("QUEUED", 1, True)
    assert dtq_env.stats()["start_skipped"] == 1
    assert dtq_env.leftovers() == {"pending": 0, "running": 0, "schedule": 0}
    assert claim_one(dtq_env, "w2").attempt == 1  # the next claim runs attempt 1 after all


def test_skip_of_an_attempt_reclaimed_meanwhile_only_records_it(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    att = claim_one(dtq_env, "w1")
    dtq_env.client.hset(dtq_env.keys.task(result.id), "lease", 0)  # as if w1 froze
    keys, argv = layout.build(dtq_env.keys, ["tests"], [layout.TaskRef(result.id, "tests")])
    assert Scripts.of(get_client()).reclaim(keys=keys, args=[*argv, "1", 1, result.id])[0] == 1

    assert skip(dtq_env, "w1", att, skipped(att, "w1", "lease_expired").history) == [0]
    record = get_task(result.id)
    assert record is not None
    assert (record["state"], record["attempt"]) == ("QUEUED", 1)  # the reclaim's new delivery
    assert [h["outcome"] for h in record["history"]] == ["lost"]
    assert len(record["skips"]) == 1
    [event] = dtq_env.events("TASK_START_SKIPPED")
    assert (event["state"], event["given_back"]) == ("QUEUED", False)


# ----- real workers -----------------------------------------------------------------------


def enqueue(kind: str) -> Any:
    if kind == "sync":
        return tasks.record.enqueue("x")
    if kind == "async":
        return tasks.async_record.enqueue("x")
    return dj.add.enqueue(1, 2)  # django.tasks: the hooks path (task_started first)


WITNESS = {"sync": "record", "async": "async_record", "hooks": "dj_add"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync", "async", "hooks"])
def test_a_worker_frozen_before_the_handler_gives_the_attempt_back(dtq_env: Env, kind: str) -> None:
    # No reaper: after the freeze the attempt is still this worker's, past its lease by its
    # clock. It is given back unrun and claimed again, as the same attempt number.
    worker = dtq_env.worker(failpoints=FREEZE)
    result = enqueue(kind)
    wait_for(finished(result), timeout=20)

    record = get_task(result.id)
    assert record is not None
    assert (record["state"], record["attempt"]) == ("SUCCEEDED", 1)
    assert [h["outcome"] for h in record["history"]] == ["succeeded"]
    assert [(s["attempt"], s["reason"]) for s in record["skips"]] == [(1, "lease_expired")]
    assert len(dtq_env.witnessed(WITNESS[kind])) == 1  # the handler ran once, after the freeze
    [event] = dtq_env.events("TASK_START_SKIPPED")
    assert (event["reason"], event["given_back"]) == ("lease_expired", True)
    stats = dtq_env.stats()
    assert (stats["start_skipped"], stats.get("reclaimed", 0), stats.get("stale", 0)) == (1, 0, 0)
    skips = [m for m in timeline.of(record) if m["kind"] == "skip"]
    assert [m["label"] for m in skips] == ["attempt 1 not started"]
    assert "lease ran out" in skips[0]["detail"]
    assert worker.poll() is None
    assert dtq_env.leftovers() == SETTLED


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "stopped"),
    [(tasks.cancellable, "stopped"), (tasks.async_cancellable, "interrupted")],
    ids=["sync", "async"],
)
def test_a_running_handler_is_told_when_its_lease_is_lost(
    dtq_env: Env, task: Any, stopped: str
) -> None:
    worker = dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    result = task.enqueue(6.0)  # outlasts the freeze: the renewal comes first on resume
    wait_for(lambda: dtq_env.witnessed(task.name.rsplit(".", 1)[1]))
    worker.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: dtq_env.stats().get("reclaimed"))  # attempt 1 taken back
    finally:
        worker.send_signal(signal.SIGCONT)
    wait_for(finished(result), timeout=30)

    rows = [(r["attempt"], r["phase"]) for r in dtq_env.witnessed(task.name.rsplit(".", 1)[1])]
    assert (1, stopped) in rows  # the renewal said "lost": the handler was told and stopped
    record = get_task(result.id)
    assert record is not None
    assert (record["state"], record["attempt"]) == ("SUCCEEDED", 2)
    assert [h["outcome"] for h in record["history"]] == ["lost", "succeeded"]
    assert dtq_env.stats()["stale"] == 1  # attempt 1's cancel outcome, fenced out
    assert record["result"] == "finished"
