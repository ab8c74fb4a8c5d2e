"""The seed's crash table, row by row: a real process SIGKILLs itself at a named failpoint,
then healthy processes finish the work. Counts come from the witness file, outside Redis."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import timedelta
from typing import Any

import pytest

import dtq
from dtq.engine.keys import GROUP
from tests.conftest import Env, wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow

KILLED = -signal.SIGKILL
SETTLED = {"pending": 0, "running": 0, "schedule": 0}


def finished(result: dtq.TaskResult) -> Any:
    """Return a condition that holds once the task is terminal."""

    def check() -> bool:
        result.refresh()
        return result.is_finished

    return check


def start_doomed_worker(env: Env, failpoint: str) -> subprocess.Popen[bytes]:
    """Start a worker that dies at failpoint, and wait until its heartbeat is visible."""
    proc = env.worker("--worker-id", "doomed", failpoints=failpoint)
    wait_for(lambda: env.client.zscore(env.keys.workers, "doomed"))
    return proc


def pending_owners(env: Env, band: int = 1) -> list[str]:
    """Return the consumer of every unacknowledged entry of the tests queue's band (all shards)."""
    return [
        row["consumer"]
        for keys, client in env.every_shard()
        if client.exists(keys.stream("tests", band))
        for row in client.xpending_range(keys.stream("tests", band), GROUP, "-", "+", 100)
    ]


def blocked_in_a_read(env: Env) -> bool:
    """Whether a worker waits in a blocking XREADGROUP (its batch reads, which claim, are done)."""
    return any(
        c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "")
        for _, client in env.every_shard()
        for c in client.client_list()
    )


# One shard: the blocking read and the claim of what it brought go in one round trip (the
# claim runs in Redis the moment the read returns), so a crash after the read is one after the
# claim. Several: the reads block on every shard at once and what they bring is claimed next.
AFTER_READ = (
    # Read but not claimed: the entry is pending on a dead consumer; redelivery is free.
    ("worker.after_read", "QUEUED", 1, 1, ["succeeded"])
    if int(os.environ.get("DTQ_TEST_SHARDS", "1")) > 1
    else ("worker.after_read", "RUNNING", 1, 2, ["lost", "succeeded"])
)
# failpoint, state right after the crash, handler runs in all, final attempt, outcomes
CRASH_TABLE = [
    AFTER_READ,
    # Claimed, handler not started: the lease runs out and the reclaim counts an attempt.
    ("worker.after_claim", "RUNNING", 1, 2, ["lost", "succeeded"]),
    # Handler done, nothing recorded: the inherent window, the handler runs again.
    ("worker.after_handler", "RUNNING", 2, 2, ["lost", "succeeded"]),
    # Outcome committed (status, result and XACK in one script): nothing to redo.
    ("worker.after_finalize", "SUCCEEDED", 1, 1, ["succeeded"]),
]


@pytest.mark.parametrize(
    ("failpoint", "after_crash", "runs", "attempt", "outcomes"),
    CRASH_TABLE,
    ids=[row[0] for row in CRASH_TABLE],
)
def test_worker_killed_at_failpoint(
    dtq_env: Env,
    failpoint: str,
    after_crash: str,
    runs: int,
    attempt: int,
    outcomes: list[str],
) -> None:
    # A far-away backstop proves recovery comes from leases and liveness, not idle time.
    dtq_env.configure(VISIBILITY_TIMEOUT=600)
    doomed = start_doomed_worker(dtq_env, failpoint)
    if failpoint == "worker.after_read":
        # Only a blocking read leaves entries read and unclaimed: a batch read claims in the
        # same call (take.lua), so the task must arrive while the worker blocks.
        wait_for(lambda: blocked_in_a_read(dtq_env))
    result = tasks.record.enqueue("payload")
    assert doomed.wait(15) == KILLED

    result.refresh()
    assert result.state == after_crash
    read_only = failpoint == "worker.after_read" and after_crash == "QUEUED"
    if read_only:
        assert pending_owners(dtq_env) == ["doomed"]

    dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    wait_for(finished(result))

    assert result.state == dtq.TaskState.SUCCEEDED
    assert result.return_value == "payload"
    assert result.attempt == attempt
    assert [h["outcome"] for h in result.history] == outcomes
    executions = dtq_env.witnessed("record")
    assert [row["attempt"] for row in executions] == list(range(attempt - runs + 1, attempt + 1))
    assert dtq_env.leftovers() == SETTLED
    if read_only:
        # Settled from the record, not from the PEL's idle time: a fresh entry, same attempt.
        assert [e["task"] for e in dtq_env.events("TASK_REDELIVERED")] == [result.id]
        wait_for(lambda: dtq_env.client.zscore(dtq_env.keys.workers, "doomed") is None)
    if "lost" in outcomes:
        assert result.history[0]["error"] == "dtq.WorkerLost"
        assert dtq_env.stats()["reclaimed"] == 1


def test_scheduler_killed_after_promote(dtq_env: Env) -> None:
    first = tasks.record.using(run_after=timedelta(seconds=0.2)).enqueue("first")
    doomed = dtq_env.spawn("dtq_scheduler", failpoints="scheduler.after_promote")
    assert doomed.wait(15) == KILLED
    first.refresh()
    assert first.state == dtq.TaskState.QUEUED  # the promotion committed before the crash

    second = tasks.record.using(run_after=timedelta(seconds=0.2)).enqueue("second")
    dtq_env.spawn("dtq_scheduler")
    dtq_env.spawn("dtq_reaper")
    dtq_env.worker()
    for result in (first, second):
        wait_for(finished(result))
        assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert sorted(row["id"] for row in dtq_env.witnessed("record")) == sorted([first.id, second.id])
    assert dtq_env.stats().get("absorbed", 0) == 0
    assert dtq_env.leftovers() == SETTLED


def test_reaper_killed_after_reclaim(dtq_env: Env) -> None:
    doomed_worker = start_doomed_worker(dtq_env, "worker.after_claim")
    result = tasks.record.enqueue("x")
    assert doomed_worker.wait(15) == KILLED
    doomed_reaper = dtq_env.spawn("dtq_reaper", failpoints="reaper.after_reclaim")
    assert doomed_reaper.wait(15) == KILLED
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.QUEUED, 1)  # requeued for attempt 2

    dtq_env.spawn("dtq_reaper")
    dtq_env.worker()
    wait_for(finished(result))
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)
    assert [row["attempt"] for row in dtq_env.witnessed("record")] == [2]
    assert dtq_env.stats()["reclaimed"] == 1
    assert dtq_env.leftovers() == SETTLED


def test_task_that_kills_every_worker_is_dead_lettered(dtq_env: Env) -> None:
    dtq_env.configure(LEASE_TIMEOUT=0.8)
    result = tasks.crasher.enqueue()
    dtq_env.spawn("dtq_reaper")
    workers = [dtq_env.worker()]

    def dead_lettered() -> bool:
        if workers[-1].poll() is not None:
            workers.append(dtq_env.worker())  # a supervisor would restart it too
        result.refresh()
        return result.is_finished

    wait_for(dead_lettered, timeout=30)
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert result.attempt == 3
    assert result.error["class"] == "dtq.WorkerLost"
    assert [h["outcome"] for h in result.history] == ["lost"] * 3
    assert [row["attempt"] for row in dtq_env.witnessed("crasher")] == [1, 2, 3]
    assert sum(proc.returncode == KILLED for proc in workers) == 3
    keys = dtq_env.keys_of(result.id)
    assert dtq_env.client_of(keys).xlen(keys.dlq("tests")) == 1
    assert dtq_env.leftovers() == SETTLED
