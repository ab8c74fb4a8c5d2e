"""A queue spread over 3 shards: submits spread, one worker drains every shard, the reaper
recovers each shard, idempotency keys dedupe across shards, an idle worker wakes for any."""

from __future__ import annotations

import signal

import pytest

import dtq
from dtq.engine import ids, shards
from dtq.engine.errors import IdempotencyInProgress
from tests.conftest import Env, wait_for
from tests.testapp import tasks

SHARDS = 3


@pytest.fixture
def sharded(dtq_env: Env) -> Env:
    dtq_env.configure(SHARDS=SHARDS)
    return dtq_env


def key_on(shard: int, stem: str = "k") -> str:
    """Return an idempotency key whose tasks on the tests queue go to shard."""
    return next(
        f"{stem}-{n}" for n in range(10_000) if shards.for_new_task("tests", f"{stem}-{n}") == shard
    )


def finished(results: list[dtq.TaskResult]) -> bool:
    for result in results:
        result.refresh()
    return all(result.is_finished for result in results)


def test_tasks_land_on_every_shard_and_one_worker_drains_them_all(sharded: Env) -> None:
    results = [tasks.record.enqueue(n) for n in range(60)]
    assert {ids.shard_of(r.id) for r in results} == set(range(SHARDS))
    for result in results:  # each record lives in the shard its id names
        keys = sharded.keys_of(result.id)
        assert sharded.client_of(keys).hget(keys.task(result.id), "state") == "QUEUED"

    sharded.worker()
    wait_for(lambda: finished(results))
    assert {r.state for r in results} == {dtq.TaskState.SUCCEEDED}
    assert sorted(row["id"] for row in sharded.witnessed("record")) == sorted(r.id for r in results)


def test_killed_worker_task_on_shard_2_is_reclaimed(sharded: Env) -> None:
    doomed = sharded.worker("--worker-id", "doomed", failpoints="worker.after_claim")
    wait_for(lambda: sharded.client.zscore(sharded.keys.workers, "doomed"))
    result = tasks.record.using(idempotency_key=key_on(2)).enqueue("payload")
    assert ids.shard_of(result.id) == 2
    assert doomed.wait(15) == -signal.SIGKILL

    sharded.worker()
    sharded.spawn("dtq_reaper")
    wait_for(lambda: finished([result]))
    assert result.state == dtq.TaskState.SUCCEEDED
    assert [h["outcome"] for h in result.history] == ["lost", "succeeded"]
    running = shards.keys(2).index("tests", "RUNNING")
    assert sharded.client_of(shards.keys(2)).zcard(running) == 0


def test_an_idempotency_key_dedupes_across_shards(sharded: Env) -> None:
    placed = {
        ids.shard_of(tasks.record.using(idempotency_key=f"o-{n}").enqueue(n).id) for n in range(30)
    }
    assert placed == set(range(SHARDS))  # keys spread over shards...
    first = tasks.record.using(idempotency_key="order-9").enqueue(9)
    for _ in range(5):  # ...and every submit of one key finds the first, wherever it went
        with pytest.raises(IdempotencyInProgress) as info:
            tasks.record.using(idempotency_key="order-9").enqueue(9)
        assert info.value.task_id == first.id


def test_an_idle_worker_wakes_for_a_task_on_any_shard(sharded: Env) -> None:
    # A block far longer than the wait below: only a wake-up, not a timeout, can pass.
    sharded.configure(BLOCK_TIMEOUT=20, SOCKET_TIMEOUT=30)
    sharded.worker("--worker-id", "idle")
    wait_for(lambda: sharded.client.zscore(sharded.keys.workers, "idle"))
    for shard in range(SHARDS):
        result = tasks.record.using(idempotency_key=key_on(shard, f"wake{shard}")).enqueue(shard)
        assert ids.shard_of(result.id) == shard
        wait_for(lambda r=result: finished([r]), timeout=5)
        assert result.state == dtq.TaskState.SUCCEEDED


def test_tasks_sharing_a_limit_share_a_shard(sharded: Env) -> None:
    # A task's own limits live in one shard, so all its tasks go there: the limit holds
    # fleet-wide. With a concurrency key, each key's line is one shard; the lines spread.
    assert len({ids.shard_of(tasks.pair_limited.enqueue(0).id) for _ in range(20)}) == 1
    for customer in ("acme", "globex", "initech"):
        placed = {ids.shard_of(tasks.per_customer.enqueue(customer, n, 0).id) for n in range(10)}
        assert len(placed) == 1
    lines = {ids.shard_of(tasks.per_customer.enqueue(f"c{n}", 0, 0).id) for n in range(30)}
    assert lines == set(range(SHARDS))
