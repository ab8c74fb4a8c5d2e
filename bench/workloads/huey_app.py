"""Huey with RedisHuey (blocking BRPOP dequeue); None results are not stored by default."""

from __future__ import annotations

from huey import RedisHuey

from workloads import REDIS_URL, handle

huey = RedisHuey("bench", url=REDIS_URL)


@huey.task()
def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task."""
    handle(seq, enqueued_at, kind)


class Producer:
    """Enqueues by calling the task."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one task."""
        noop(seq, ts, kind)

    def close(self) -> None:
        """Nothing to release."""


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
