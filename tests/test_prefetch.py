"""Claiming ahead: a busy worker of short tasks claims beyond its free slots, and gives back
what it has not started when it stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dtq.conf import dtq_settings
from dtq.engine import read_side
from dtq.engine.worker import Worker, claim_ahead
from tests.conftest import Env
from tests.testapp import tasks

# Handlers run in this process close stale database connections first.
pytestmark = pytest.mark.django_db


def test_only_attempts_expected_to_start_within_a_round_trip_are_claimed_ahead() -> None:
    limit = dtq_settings.PREFETCH_LIMIT
    assert claim_ahead(8, 0.002, 0.001) == 16  # 8 slots, each starts two more per trip
    assert claim_ahead(8, 0.002, 0.0001) == limit  # capped
    assert claim_ahead(8, 0.002, 0.5) == 0  # handlers slower than the trip: never
    assert claim_ahead(8, 0.002, 0.0) == 0  # no handler timed yet
    assert claim_ahead(8, 0.0, 0.001) == 0  # no read timed yet


def test_claim_ahead_can_be_turned_off(dtq_env: Env) -> None:
    dtq_env.configure(PREFETCH_LIMIT=0)
    assert claim_ahead(8, 0.002, 0.0001) == 0


def claim_three(stop: bool) -> dict[str, Any]:
    """Claim three attempts for a worker of one slot, start them, stop it at once or not."""

    async def run() -> dict[str, Any]:
        worker = Worker(["tests"], concurrency=1)
        try:
            taken = await worker.readers[0].take(3)  # one for the slot, two ahead of it
            worker._start_all(taken.attempts)
            held = {
                "running": worker.runner.running,
                "waiting": [att.id for att in worker.runner.waiting],
            }
            if stop:
                worker.stop()  # gives back the waiting ones at once
            await wait_for_async(lambda: not worker.runner.held, worker)
            return held | {"claimed": [att.id for att in taken.attempts]}
        finally:
            await worker.heartbeat.aclose()
            for reader in worker.readers:
                await reader.aclose()
            for finalizer in worker.finalizers.values():
                await finalizer.aclose()
            for client in worker._clients.values():
                await client.aclose()
            worker.runner.shutdown()

    return asyncio.run(run())


def test_attempts_claimed_ahead_start_in_order_as_the_slot_frees(dtq_env: Env) -> None:
    ids = [tasks.hold.enqueue(0.05).id for _ in range(3)]
    held = claim_three(stop=False)
    assert held == {"running": 1, "waiting": ids[1:], "claimed": ids}
    records = [read_side.get_task(i) for i in ids]
    assert all(r is not None and (r["state"], r["attempt"]) == ("SUCCEEDED", 1) for r in records)
    ends = [r["finished_at"] for r in records if r is not None]
    assert ends == sorted(ends)  # one slot: each started when the one before it ended


def test_a_stop_gives_back_the_attempts_claimed_ahead(dtq_env: Env) -> None:
    ids = [tasks.hold.enqueue(0.3).id for _ in range(4)]
    held = claim_three(stop=True)
    assert held["claimed"] == ids[:3]
    assert held["running"] == 1 and held["waiting"] == ids[1:3]
    first, *given_back = (read_side.get_task(i) for i in ids[:3])
    assert first is not None and first["state"] == "SUCCEEDED"
    for record in given_back:
        assert record is not None and (record["state"], record["attempt"]) == ("QUEUED", 0)
    skipped = {e["task"]: e for e in dtq_env.events("TASK_START_SKIPPED")}
    assert sorted(skipped) == sorted(ids[1:3])
    assert all(e["reason"] == "worker_stopping" and e["given_back"] for e in skipped.values())

    # Another worker runs them, and the one never claimed, each once.
    assert dtq_env.worker("--burst", "--concurrency", "2").wait(60) == 0
    started = [w["id"] for w in dtq_env.witnessed("hold") if w["phase"] == "start"]
    assert sorted(started) == sorted(ids[1:])
    for task_id in ids[1:]:
        record = read_side.get_task(task_id)
        assert record is not None and (record["state"], record["attempt"]) == ("SUCCEEDED", 1)


async def wait_for_async(condition: Any, worker: Worker, timeout: float = 10.0) -> None:
    """Keep the worker's loop turning (handlers report back on it) until condition holds."""
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        for finalizer in worker.finalizers.values():
            await finalizer.flush()
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")
