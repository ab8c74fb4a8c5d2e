"""Workflow fan-in under SIGKILLed workers: the chord callback is enqueued exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest

import dtq
from tests.conftest import Env, wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow

MEMBERS = 200


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_chord_fans_in_exactly_once_while_workers_are_killed(dtq_env: Env) -> None:
    dtq_env.configure(HEARTBEAT_INTERVAL=0.2, LEASE_TIMEOUT=1.0, REAPER_INTERVAL=0.2)
    dtq_env.spawn("dtq_reaper")
    # One worker dies between finalize (which counted its members) and its advance: the
    # reaper's sweep has to release what that worker would have released.
    workers = [dtq_env.worker("--concurrency", "4") for _ in range(2)]
    workers.append(
        dtq_env.worker("--concurrency", "4", failpoints="worker.before_workflow_advance@3")
    )
    header = dtq.group(tasks.wf_slow.s(i, 0.3) for i in range(MEMBERS))
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    key = dtq_env.keys.workflow(wf.id)
    rng = random.Random(18)
    kills = 0
    started = time.monotonic()
    # A worker takes a few seconds to start on a loaded machine: kill only once members run.
    wait_for(lambda: dtq_env.witnessed("wf_slow"), timeout=30)
    while int(dtq_env.client.hget(key, "done") or 0) < MEMBERS:
        assert time.monotonic() - started < 150, "the fan-in did not finish"
        time.sleep(rng.uniform(0.5, 1.5))
        victim = rng.randrange(len(workers))
        kill(workers[victim])
        kills += 1
        workers[victim] = dtq_env.worker("--concurrency", "4")
    assert kills >= 3
    wait_for(lambda: (wf.refresh(), wf.is_finished)[1], timeout=60)
    elapsed = time.monotonic() - started

    assert wf.state == "SUCCEEDED", wf.state
    assert wf.return_value == list(range(MEMBERS))
    assert all(m.state == "SUCCEEDED" for m in wf.members)
    callback = wf.members[-1].task_id
    submitted = [e for e in dtq_env.events("TASK_SUBMITTED") if e["task"] == callback]
    assert len(submitted) == 1  # enqueued exactly once
    runs = dtq_env.witnessed("wf_collect")
    assert len(runs) == 1 and runs[0]["args"] == [list(range(MEMBERS))]
    assert dtq_env.client.hget(key, "done") == str(MEMBERS + 1)
    ran = {r["value"] for r in dtq_env.witnessed("wf_slow")}
    assert ran == set(range(MEMBERS))  # every member ran (some twice: at-least-once)
    assert elapsed < 210
    print(f"fan-in of {MEMBERS} with {kills} worker kills finished in {elapsed:.1f}s")


def test_reaper_releases_the_next_step_when_the_worker_dies_before_its_advance(
    dtq_env: Env,
) -> None:
    doomed = dtq_env.worker(failpoints="worker.before_workflow_advance")
    wf = dtq.chain(tasks.wf_add.s(1, 1), tasks.wf_add.s(1)).enqueue()
    assert doomed.wait(15) == -signal.SIGKILL
    wf.refresh()
    assert [m.state for m in wf.members] == ["SUCCEEDED", "WAITING"]  # counted, not released
    assert dtq_env.client.smembers(dtq_env.keys.workflow_ready(wf.id)) == {"1"}
    dtq_env.configure(REAPER_INTERVAL=0.2)
    dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    wait_for(lambda: (wf.refresh(), wf.is_finished)[1], timeout=30)
    assert wf.results == [2, 3]
    assert len(dtq_env.witnessed("wf_add")) == 2
