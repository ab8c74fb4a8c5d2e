"""Stand-ins for Django's test backends, built on DtqBackend and real dtq_worker processes.

WorkerRunBackend takes ImmediateBackend's place: enqueue() submits to Redis, runs a
`dtq_worker --burst` process until the queue is empty, replays the worker's django.tasks
log records here, and returns the result read back from Redis. QueuedBackend takes
DummyBackend's place: DtqBackend with no worker, plus the `results` and `clear()` that
Django's tests use.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

from asgiref.sync import sync_to_async

from dtq.backends import DtqBackend, DtqTaskResult
from dtq.conf import dtq_settings
from dtq.engine.connection import get_client

RELAY = "DTQ-DJANGO-TASKS-LOG "


class RelayFormatter(logging.Formatter):
    """Format a log record as one JSON line that another process can replay."""

    def format(self, record: logging.LogRecord) -> str:
        """Return RELAY and the record's level, message and traceback as JSON."""
        exc_text = self.formatException(record.exc_info) if record.exc_info else None
        row = {"level": record.levelno, "msg": record.getMessage(), "exc_text": exc_text}
        return RELAY + json.dumps(row)


def replay(stderr: str) -> None:
    """Log the worker's relayed django.tasks records in this process, in order."""
    logger = logging.getLogger("django.tasks")
    for line in stderr.splitlines():
        if line.startswith(RELAY):
            row = json.loads(line.removeprefix(RELAY))
            record = logger.makeRecord(logger.name, row["level"], "worker", 0, row["msg"], (), None)
            record.exc_text = row["exc_text"]
            logger.handle(record)


def run_worker(queue: str) -> None:
    """Run a real dtq_worker on queue until it is empty; replay its django.tasks logs."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "dtq_worker", "--burst", "--queue", queue],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode:
        print(f"\n[dtq_worker exited {done.returncode}]", file=sys.stderr)
    replay(done.stderr)


class WorkerRunBackend(DtqBackend):
    """DtqBackend whose enqueue() also runs a worker, so results come back finished."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> DtqTaskResult:
        """Enqueue, run a worker until the queue is empty, return the stored result."""
        result = super().enqueue(task, args, kwargs)
        run_worker(task.queue_name)
        return self.get_result(result.id)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> DtqTaskResult:
        """Enqueue from async code (the worker runs on a thread)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)


class QueuedBackend(DtqBackend):
    """DtqBackend with DummyBackend's test helpers: results (from Redis) and clear()."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._ids: list[str] = []

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> DtqTaskResult:
        """Enqueue and remember the id."""
        result = super().enqueue(task, args, kwargs)
        self._ids.append(result.id)
        return result

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> DtqTaskResult:
        """Enqueue from async code and remember the id."""
        result = await super().aenqueue(task, args, kwargs)
        self._ids.append(result.id)
        return result

    @property
    def results(self) -> list[DtqTaskResult]:
        """Return the results enqueued here, read from Redis."""
        return [self.get_result(task_id) for task_id in self._ids]

    def clear(self) -> None:
        """Forget the results: delete this run's keys (its own prefix only)."""
        self._ids.clear()
        client = get_client()
        found = list(client.scan_iter(f"{dtq_settings.KEY_PREFIX}:*", count=1000))
        for i in range(0, len(found), 500):
            client.delete(*found[i : i + 500])
