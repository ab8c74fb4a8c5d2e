"""An idle worker's blocking read and the claim of what it brings, in one round trip: take.lua
goes in the same pipeline right behind the blocking XREADGROUP (Reader.wait_and_take)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from dtq.engine import clock, gateway, read_side
from dtq.engine.connection import new_async_client
from dtq.engine.executor import START_WITHIN
from dtq.engine.reader import Reader
from dtq.engine.submit import Submission, submit_many
from dtq.engine.worker import Worker
from tests.ops_support import keys
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def blocked_take(capacity: int, arrive: Callable[[], Any]) -> tuple[gateway.Taken, Reader]:
    """Let a reader of the tests queue block (after a take found nothing), then run arrive()."""

    async def run() -> tuple[gateway.Taken, Reader]:
        client = new_async_client()
        reader = Reader(client, keys(), ["tests"], "w1")
        try:
            watch = (await reader.take(capacity)).watch
            assert watch, "the queue should be empty to start with"
            waiting = asyncio.create_task(reader.wait_and_take(watch, capacity))
            await asyncio.sleep(0.1)  # the read is blocked in Redis now
            await asyncio.to_thread(arrive)
            taken = await asyncio.wait_for(waiting, 5)
            if not taken.read:  # that read ended (BLOCK_TIMEOUT) before the arrival: block again
                taken = await asyncio.wait_for(reader.wait_and_take(watch, capacity), 5)
            return taken, reader
        finally:
            await reader.aclose()
            await client.aclose()

    return asyncio.run(run())


def test_an_arrival_is_claimed_in_the_round_trip_of_the_blocking_read(dtq_env: Any) -> None:
    ids: list[str] = []
    taken, reader = blocked_take(8, lambda: ids.append(tasks.record.enqueue("x").id))
    assert [att.id for att in taken.attempts] == ids
    assert taken.attempts[0].attempt == 1 and taken.left == [] and reader.unclaimed == []
    record = read_side.get_task(ids[0])
    assert record is not None and (record["state"], record["worker"]) == ("RUNNING", "w1")
    assert len(dtq_env.events("TASK_STARTED")) == 1


@pytest.mark.parametrize("capacity", [1, 2])
def test_the_claim_behind_the_read_also_takes_what_else_is_new(dtq_env: Any, capacity: int) -> None:
    # Two bands arrive in one submit call. Redis serves a blocked read with the stream that
    # woke it alone (the low band, written first); the claim behind it then reads on for the
    # capacity left, so the high band starts in the same round trip when a slot is free.
    ids: list[str] = []

    def arrive() -> None:
        accepted = submit_many(
            [
                Submission(name=tasks.record.name, queue="tests", args=("low",), priority=-50),
                Submission(name=tasks.record.name, queue="tests", args=("high",), priority=50),
            ]
        )
        ids.extend(a.id for a in accepted)  # type: ignore[union-attr]

    taken, reader = blocked_take(capacity, arrive)
    low, high = ids
    assert [att.id for att in taken.attempts] == [low, high][:capacity]
    assert reader.unclaimed == [] and taken.read == capacity
    states = [read_side.get_task(i)["state"] for i in (low, high)]  # type: ignore[index]
    assert states == ["RUNNING", "RUNNING" if capacity == 2 else "QUEUED"]


def test_a_second_blocking_read_claims_only_what_it_delivered(dtq_env: Any) -> None:
    # The claim behind the read starts after the newest entry the worker knew of: the
    # attempts it already runs (pending under the same consumer) are not handed out again.
    async def run() -> list[list[str]]:
        client = new_async_client()
        reader = Reader(client, keys(), ["tests"], "w1")
        got = []
        try:
            for text in ("one", "two"):
                watch = (await reader.take(8)).watch
                waiting = asyncio.create_task(reader.wait_and_take(watch, 8))
                await asyncio.sleep(0.1)
                await asyncio.to_thread(tasks.record.enqueue, text)
                taken = await asyncio.wait_for(waiting, 5)
                if not taken.read:  # that read ended (BLOCK_TIMEOUT) before the arrival
                    taken = await asyncio.wait_for(reader.wait_and_take(watch, 8), 5)
                got.append([att.payload for att in taken.attempts])
        finally:
            await reader.aclose()
            await client.aclose()
        return got

    first, second = asyncio.run(run())
    assert len(first) == len(second) == 1 and first != second
    assert dtq_env.stats()["started"] == 2


def test_entries_there_before_the_read_beyond_capacity_wait_unclaimed(dtq_env: Any) -> None:
    # Entries that arrive between the take that found nothing and the blocking read are
    # read at once, up to COUNT per stream: here two for one free slot. The high band is
    # claimed; the other, read as ours, waits unclaimed (still QUEUED) for claim.lua.
    async def run() -> tuple[gateway.Taken, Reader, list[str]]:
        client = new_async_client()
        reader = Reader(client, keys(), ["tests"], "w1")
        try:
            watch = (await reader.take(1)).watch
            accepted = submit_many(
                [
                    Submission(name=tasks.record.name, queue="tests", args=("low",), priority=-50),
                    Submission(name=tasks.record.name, queue="tests", args=("high",), priority=50),
                ]
            )
            ids = [a.id for a in accepted]  # type: ignore[union-attr]
            return await asyncio.wait_for(reader.wait_and_take(watch, 1), 5), reader, ids
        finally:
            await reader.aclose()
            await client.aclose()

    taken, reader, (low, high) = asyncio.run(run())
    assert [att.id for att in taken.attempts] == [high]
    assert [e.task_id for e in reader.unclaimed] == [low]
    assert read_side.get_task(low)["state"] == "QUEUED"  # type: ignore[index]


def test_a_claim_after_a_long_block_gets_its_whole_lease(dtq_env: Any) -> None:
    # The claim behind a read starts the lease when the read returns, not when it was sent:
    # the worker dates it by how long Redis says the read blocked (TIME went just before it),
    # so an arrival late in a long block still has its whole start window.
    dtq_env.configure(BLOCK_TIMEOUT=5, SOCKET_TIMEOUT=10, LEASE_TIMEOUT=3)

    async def run() -> float:
        client = new_async_client()
        reader = Reader(client, keys(), ["tests"], "w1")
        try:
            watch = (await reader.take(8)).watch
            waiting = asyncio.create_task(reader.wait_and_take(watch, 8))
            await asyncio.sleep(1.5)
            await asyncio.to_thread(tasks.record.enqueue, "late")
            [att] = (await asyncio.wait_for(waiting, 5)).attempts
            return att.lease_until - clock.now()
        finally:
            await reader.aclose()
            await client.aclose()

    left = asyncio.run(run())
    assert 3 * START_WITHIN - 0.5 < left <= 3 * START_WITHIN


def test_an_idle_worker_blocks_again_without_a_take_of_its_own(dtq_env: Any) -> None:
    # The take behind a blocking read read everything new: the next read blocks at once (a
    # blocking read returns at once what came since, with its take) instead of first taking
    # alone. Only the worker's very first read is a take of its own.
    async def run() -> tuple[list[str], str]:
        worker = Worker(["tests"], concurrency=2)
        reader, calls = worker.readers[0], []
        take, wait_and_take = reader.take, reader.wait_and_take

        async def counted_take(capacity: int) -> gateway.Taken:
            calls.append("take")
            return await take(capacity)

        async def counted_wait(watch: list[str], capacity: int) -> gateway.Taken:
            calls.append("wait")
            return await wait_and_take(watch, capacity)

        reader.take, reader.wait_and_take = counted_take, counted_wait  # type: ignore[method-assign]
        main = asyncio.create_task(worker.main())
        try:
            await until(lambda: "wait" in calls)
            await asyncio.sleep(0.1)  # blocked in Redis now
            task_id = (await asyncio.to_thread(tasks.record.enqueue, "x")).id
            await until(lambda: worker.processed == 1)
            arrived = len(calls)
            await until(lambda: len(calls) > arrived + 1)  # blocked again, and timed out once
        finally:
            worker.stop()
            await asyncio.wait_for(main, 10)
        return calls, task_id

    calls, task_id = asyncio.run(run())
    assert calls[0] == "take" and set(calls[1:]) == {"wait"}
    record = read_side.get_task(task_id)
    assert record is not None and record["state"] == "SUCCEEDED"


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the loop turn until condition holds."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")
