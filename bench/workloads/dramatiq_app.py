"""Dramatiq with its Redis broker and default middleware."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from workloads import REDIS_URL, handle

broker = RedisBroker(url=REDIS_URL)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", actor_name="noop")
def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark actor."""
    handle(seq, enqueued_at, kind)


class Producer:
    """Enqueues with Actor.send."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one message."""
        noop.send(seq, ts, kind)

    def close(self) -> None:
        """Close the broker's connections."""
        broker.close()


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
