"""dtq producer side: sets up the bench Django project and enqueues dtqbench.tasks.noop."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtqbench.settings")

import django

django.setup()

from dtqbench.tasks import noop  # noqa: E402


class Producer:
    """Enqueues with Task.enqueue (one submit script call per task, per dtq's design)."""

    def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Submit one task."""
        noop.enqueue(seq, ts, kind)

    def enqueue_bulk(self, items: list[tuple[int, float, str]]) -> None:
        """Submit many tasks with the public Task.enqueue_many (pipelined)."""
        noop.enqueue_many([(item, {}) for item in items])

    def close(self) -> None:
        """Nothing to release."""


ASYNC = False


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
