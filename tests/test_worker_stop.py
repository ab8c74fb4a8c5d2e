"""Stopping a worker: SIGTERM drains, a second signal stops now; neither prints a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import dtq
from tests.conftest import ROOT, Env, wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow


def worker_with_stderr(env: Env, *args: str) -> subprocess.Popen[str]:
    """Start a dtq_worker on the tests queue whose stderr the test reads."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "dtq_worker", "--queue", "tests", *args],
        cwd=ROOT,
        env=env.env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    env.procs.append(proc)  # type: ignore[arg-type]
    return proc


def stopped(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str, float]:
    """Wait for the process to end; return its exit code, its stderr and how long it took."""
    began = time.monotonic()
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err, time.monotonic() - began


def start_mix(env: Env, seconds: float) -> list[dtq.TaskResult]:
    """Submit sync and async tasks of `seconds` and wait until every handler runs."""
    results = [tasks.hold.enqueue(seconds) for _ in range(3)]
    results += [tasks.async_cancellable.enqueue(seconds) for _ in range(2)]
    wait_for(lambda: len(env.witnessed("hold")) == 3)
    wait_for(lambda: len(env.witnessed("async_cancellable")) == 2)
    return results


def all_done(results: list[dtq.TaskResult]) -> Any:
    return lambda: all(dtq.TaskResult.load(r.id).is_finished for r in results)


def test_sigterm_finishes_running_tasks_and_exits_without_a_traceback(dtq_env: Env) -> None:
    proc = worker_with_stderr(dtq_env)
    results = start_mix(dtq_env, 1.0)
    proc.send_signal(signal.SIGTERM)

    code, err, _ = stopped(proc)

    assert (code, "Traceback" in err) == (0, False), err
    assert "worker stopped" in err and "processed=5" in err
    for result in results:
        result.refresh()
        assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert dtq_env.leftovers() == {"pending": 0, "running": 0, "schedule": 0}


def test_sigterm_past_the_shutdown_timeout_leaves_tasks_to_the_reaper(dtq_env: Env) -> None:
    proc = worker_with_stderr(dtq_env, "--shutdown-timeout", "0.5")
    results = start_mix(dtq_env, 4.0)
    proc.send_signal(signal.SIGTERM)

    code, err, took = stopped(proc)

    assert (code, "Traceback" in err) == (0, False), err
    assert err.count("left for the reaper") == 1
    assert took < 3.0  # it did not wait for the handler threads it had to abandon
    dtq_env.spawn("dtq_reaper")
    dtq_env.worker()
    wait_for(all_done(results), timeout=30)
    for result in results:
        result.refresh()
        assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)
        assert [h["outcome"] for h in result.history] == ["lost", "succeeded"]


def test_a_second_sigterm_stops_at_once_with_one_line(dtq_env: Env) -> None:
    proc = worker_with_stderr(dtq_env)
    results = start_mix(dtq_env, 4.0)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)

    code, err, took = stopped(proc)

    assert (code, "Traceback" in err) == (1, False), err
    assert err.count("second signal: stopping now") == 1
    assert took < 2.0
    dtq_env.spawn("dtq_reaper")
    dtq_env.worker()
    wait_for(all_done(results), timeout=30)
    assert {dtq.TaskResult.load(r.id).state for r in results} == {dtq.TaskState.SUCCEEDED}
