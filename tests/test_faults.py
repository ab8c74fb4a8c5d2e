"""Faults short of a clean crash: many competing processes, a frozen worker, long tasks,
and a Redis server that restarts under running workers, schedulers and reapers."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from redis.exceptions import RedisError

import dtq
from dtq.embedded import RedisServer
from tests.conftest import Env, wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow

SETTLED = {"pending": 0, "running": 0, "schedule": 0}


def finished(result: dtq.TaskResult) -> Any:
    """Return a condition that holds once the task is terminal."""

    def check() -> bool:
        result.refresh()
        return result.is_finished

    return check


def all_finished(results: list[dtq.TaskResult]) -> Any:
    """Return a condition that holds once every task is terminal (refreshing only the rest)."""
    left = list(results)

    def check() -> bool:
        left[:] = [r for r in left if not finished(r)()]
        return not left

    return check


def submit_mix(n: int) -> list[tuple[dtq.TaskResult, int]]:
    """Submit n tasks: plain, delayed and flaky; return (result, expected attempts) pairs."""
    out = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            out.append((tasks.flaky.enqueue(1 + i % 2), 2 + i % 2))
        elif kind == 1:
            delay = timedelta(seconds=0.05 * (i % 10))
            out.append((tasks.record.using(run_after=delay).enqueue(i), 1))
        elif kind == 2:
            delay = timedelta(seconds=0.1)
            out.append((tasks.flaky.using(run_after=delay).enqueue(1), 2))
        else:
            out.append((tasks.record.using(priority=(i % 3 - 1) * 50).enqueue(i), 1))
    return out


def test_competing_processes_run_each_attempt_exactly_once(dtq_env: Env) -> None:
    for _ in range(2):
        dtq_env.worker("--concurrency", "8")
        dtq_env.spawn("dtq_scheduler")
        dtq_env.spawn("dtq_reaper")
    submitted = submit_mix(300)
    wait_for(all_finished([r for r, _ in submitted]), timeout=40)

    runs = Counter((row["id"], row["attempt"]) for row in dtq_env.witnessed())
    assert [key for key, count in runs.items() if count > 1] == []
    for result, attempts in submitted:
        assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, attempts)
        assert all(runs[(result.id, a)] == 1 for a in range(1, attempts + 1))
    assert sum(runs.values()) == sum(attempts for _, attempts in submitted)
    stats = dtq_env.stats()
    assert [stats.get(name, 0) for name in ("absorbed", "stale", "reclaimed")] == [0, 0, 0]
    assert dtq_env.leftovers() == SETTLED


def test_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it(dtq_env: Env) -> None:
    frozen = dtq_env.worker()
    result = tasks.hold.enqueue(1.0)
    wait_for(lambda: dtq_env.witnessed("hold"))
    frozen.send_signal(signal.SIGSTOP)  # past its lease: its heartbeat stops with it
    try:
        dtq_env.spawn("dtq_reaper")
        other = dtq_env.worker()
        wait_for(finished(result))
    finally:
        frozen.send_signal(signal.SIGCONT)
    wait_for(lambda: dtq_env.stats().get("stale"))  # the late finalize of attempt 1

    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)
    assert f".{other.pid}." in result.record["worker"]
    assert [h["outcome"] for h in result.history] == ["lost", "succeeded"]
    rejected = dtq_env.events("TASK_STALE_COMPLETION_REJECTED")
    assert [(e["task"], e["attempt"], e["state"]) for e in rejected] == [
        (result.id, 1, "SUCCEEDED")
    ]
    starts = [row for row in dtq_env.witnessed("hold") if row["phase"] == "start"]
    assert [(row["pid"], row["attempt"]) for row in starts] == [
        (frozen.pid, 1),
        (other.pid, 2),
    ]
    assert frozen.poll() is None  # it carries on after losing the lease
    assert dtq_env.leftovers() == SETTLED


def test_task_longer_than_lease_and_visibility_runs_once(dtq_env: Env) -> None:
    dtq_env.configure(VISIBILITY_TIMEOUT=1)  # below the task's length too, not just the lease
    result = tasks.hold.enqueue(2.5)
    dtq_env.worker()
    dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    wait_for(finished(result))

    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert [row["phase"] for row in dtq_env.witnessed("hold")] == ["start", "end"]
    assert dtq_env.stats().get("reclaimed", 0) == 0
    assert dtq_env.leftovers() == SETTLED


def last_beat(env: Env, role: str) -> float:
    """Return the newest liveness timestamp a scheduler or reaper wrote."""
    newest = env.client.zrange(env.keys.processes(role), -1, -1, withscores=True)
    return float(newest[0][1]) if newest else 0.0


def submit_until_done(job: threading.Thread) -> list[dtq.TaskResult]:
    """Keep submitting while job runs; return the tasks Redis accepted."""
    accepted = []
    while job.is_alive():
        with contextlib.suppress(RedisError):  # refused is not accepted: no promise to keep
            accepted.append(tasks.record.enqueue("meanwhile"))
    return accepted


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_processes_survive_a_redis_restart(
    dtq_env: Env, private_redis: RedisServer, stop_signal: int
) -> None:
    procs = [dtq_env.worker(), dtq_env.spawn("dtq_scheduler"), dtq_env.spawn("dtq_reaper")]
    run_id = dtq_env.client.info("server")["run_id"]
    before = [r for r, _ in submit_mix(30)] + [tasks.hold.enqueue(0.5) for _ in range(4)]
    wait_for(lambda: dtq_env.witnessed("hold"))  # some attempts are running across the restart

    restart = threading.Thread(target=private_redis.restart, args=(stop_signal, 0.5))
    restart.start()
    during = submit_until_done(restart)
    restarted = time.time()
    assert dtq_env.client.info("server")["run_id"] != run_id
    after = submit_mix(30)
    wait_for(all_finished(before + during + [r for r, _ in after]), timeout=30)

    # With appendonly, what Redis acknowledged before it stopped is still there. Attempts
    # running across the restart may be reclaimed; those started after it run undisturbed.
    assert [(r.id, r.state) for r in before + during if r.state != "SUCCEEDED"] == []
    assert [
        (r.id, r.name, r.state, r.attempt, n)
        for r, n in after
        if (r.state, r.attempt) != ("SUCCEEDED", n)
    ] == []
    assert [proc.poll() for proc in procs] == [None, None, None]
    # The scheduler promoted the delayed tasks and the reaper keeps beating: both reconnected.
    wait_for(lambda: last_beat(dtq_env, "reaper") > restarted)
    wait_for(lambda: last_beat(dtq_env, "scheduler") > restarted)
    assert dtq_env.leftovers() == SETTLED
