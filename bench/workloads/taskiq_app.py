"""taskiq with taskiq-redis RedisStreamBroker (consumer group, XACK after execution)."""

from __future__ import annotations

try:
    from taskiq_redis import RedisStreamBroker as _Broker
except ImportError:  # older taskiq-redis: fall back to the list broker
    from taskiq_redis import ListQueueBroker as _Broker  # type: ignore[assignment]

from workloads import REDIS_URL, ahandle

broker = _Broker(url=REDIS_URL, queue_name="bench")
BROKER_KIND = _Broker.__name__


@broker.task(task_name="noop")
async def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task."""
    await ahandle(seq, enqueued_at, kind)


class Producer:
    """Enqueues with AsyncTaskiqDecoratedTask.kiq."""

    async def start(self) -> None:
        """Start the client-side broker."""
        await broker.startup()

    async def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one task."""
        await noop.kiq(seq, ts, kind)

    async def close(self) -> None:
        """Shut the broker down."""
        await broker.shutdown()


ASYNC = True


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
