"""RQ: default Worker (forks a work horse per job), default result_ttl."""

from __future__ import annotations

import os

from redis import Redis
from rq import Queue

from workloads import REDIS_URL, handle


def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task; logged under the worker's pid, not the per-job work horse's."""
    handle(seq, enqueued_at, kind, proc=os.getppid())


class Producer:
    """Enqueues with Queue.enqueue."""

    def __init__(self) -> None:
        self.queue = Queue("bench", connection=Redis.from_url(REDIS_URL))

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one job."""
        self.queue.enqueue(noop, seq, ts, kind)

    def close(self) -> None:
        """Close the connection pool."""
        self.queue.connection.close()


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
