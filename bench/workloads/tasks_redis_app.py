"""django-tasks-redis producer and task: a standard @django.tasks.task (sync handler)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djpeers.tasks_redis")

import django

django.setup()

from django.tasks import task  # noqa: E402

from workloads import handle  # noqa: E402


@task
def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task."""
    handle(seq, enqueued_at, kind)


class Producer:
    """Enqueues with Task.enqueue (one MULTI/EXEC transaction per task)."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one task."""
        noop.enqueue(seq, ts, kind)

    def close(self) -> None:
        """Nothing to release."""


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
