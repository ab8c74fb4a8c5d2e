"""saq: asyncio worker over Redis lists, concurrency = BENCH_CONCURRENCY, default job options."""

from __future__ import annotations

from typing import Any

from saq import Queue

from workloads import CONCURRENCY, REDIS_URL, ahandle

queue = Queue.from_url(REDIS_URL, name="bench")


async def noop(ctx: dict[str, Any], *, seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark job."""
    await ahandle(seq, enqueued_at, kind)


settings = {"queue": queue, "functions": [noop], "concurrency": CONCURRENCY}


class Producer:
    """Enqueues with Queue.enqueue."""

    async def start(self) -> None:
        """Connect the queue."""
        await queue.connect()

    async def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one job."""
        await queue.enqueue("noop", seq=seq, enqueued_at=ts, kind=kind)

    async def close(self) -> None:
        """Disconnect."""
        await queue.disconnect()


ASYNC = True


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
