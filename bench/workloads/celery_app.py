"""Celery 5 app: Redis broker, acks_late, no result backend."""

from __future__ import annotations

from celery import Celery

from workloads import REDIS_URL, handle

app = Celery("bench", broker=REDIS_URL)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_default_queue="bench",
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task."""
    handle(seq, enqueued_at, kind)


class Producer:
    """Enqueues with Task.delay (one LPUSH round trip per task)."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one task."""
        noop.delay(seq, ts, kind)

    def close(self) -> None:
        """Nothing to release."""


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
