"""django-vtasks producer and task (Valkey backend): an async handler, as vtasks is async-first."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djpeers.vtasks")

import django

django.setup()

from django.tasks import task_backends  # noqa: E402
from django_vtasks import task  # noqa: E402

from workloads import ahandle  # noqa: E402


@task
async def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task."""
    await ahandle(seq, enqueued_at, kind)


class Producer:
    """Enqueues with Task.enqueue (sync: one LPUSH per task)."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one task."""
        noop.enqueue(seq, ts, kind)

    def enqueue_bulk(self, items: list[tuple[int, float, str]]) -> None:
        """Send many tasks with the backend's enqueue_many (one LPUSH per queue)."""
        task_backends["default"].enqueue_many([(noop, item, {}) for item in items])

    def close(self) -> None:
        """Nothing to release."""


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
