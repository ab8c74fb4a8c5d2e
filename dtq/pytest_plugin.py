"""dtq's pytest plugin for projects' own tests: private Redis keys per test, queued tasks run
in-process through the real scripts, and assertions on what was enqueued (docs/testing.md).

Installing dtq registers it (the `pytest11` entry point); nothing happens until a test asks
for a fixture. Django must be configured (pytest-django, or django.setup() in a conftest).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

WAITING_STATES = ("QUEUED", "PENDING", "RETRYING")  # enqueued and not yet run


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One task waiting to run, as the test sees it."""

    id: str
    name: str  # the registered name (a django task's module path)
    queue: str
    state: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int


def _task_name(task: Any) -> str:
    """Return the registered name of a dtq Task, a django.tasks Task or a name."""
    if isinstance(task, str):
        return task
    name = getattr(task, "module_path", None) or getattr(task, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"expected a task or a task name, got {task!r}")
    return name


class DtqQueue:
    """The `dtq_queue` fixture: run what is queued and look at what is waiting."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def run(self, queue: str | None = None, *, max_tasks: int | None = None) -> list[str]:
        """Run what is queued (dtq.testing.run_queued) and return the ids of the tasks run."""
        from dtq.testing import run_queued

        return run_queued(queue, max_tasks=max_tasks)

    def enqueued(self, task: Any = None, queue: str | None = None) -> list[Enqueued]:
        """Return the tasks waiting to run (of one task and queue if given), oldest first."""
        from dtq.engine import read_side

        name = None if task is None else _task_name(task)
        found = []
        for queue_name in [queue] if queue else read_side.queue_names():
            for state in WAITING_STATES:
                found += read_side.list_tasks(queue_name, state, limit=1000)["tasks"]
        waiting = [_enqueued(record) for record in found]
        return sorted(
            (w for w in waiting if name is None or w.name == name), key=lambda w: w.id
        )  # ids sort by creation time

    def assert_enqueued(self, task: Any, *args: Any, **kwargs: Any) -> Enqueued:
        """Assert one waiting run of task with exactly these arguments; return it."""
        runs = self.enqueued(task)
        matches = [r for r in runs if (r.args, r.kwargs) == (list(args), kwargs)]
        if len(matches) != 1:
            seen = [(r.args, r.kwargs) for r in runs] or "nothing"
            raise AssertionError(
                f"expected one enqueued {_task_name(task)}(*{list(args)!r}, **{kwargs!r}), "
                f"found {len(matches)}; enqueued runs of it: {seen}"
            )
        return matches[0]

    def assert_nothing_enqueued(self) -> None:
        """Assert that no task is waiting to run."""
        waiting = self.enqueued()
        if waiting:
            raise AssertionError(f"expected no enqueued task, found {waiting!r}")


def _enqueued(record: dict[str, Any]) -> Enqueued:
    raw = record.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return Enqueued(
        id=record["id"],
        name=record.get("name", ""),
        queue=record.get("queue", ""),
        state=str(record.get("state", "")),
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        priority=int(record.get("priority") or 0),
    )


@pytest.fixture
def dtq_keys() -> Iterator[str]:
    """Give the test a private DTQ KEY_PREFIX on the configured Redis; delete its keys after."""
    from django.conf import settings
    from django.test import override_settings

    from dtq.engine import shards

    prefix = f"dtqtest-{uuid.uuid4().hex[:12]}"
    with override_settings(DTQ={**getattr(settings, "DTQ", {}), "KEY_PREFIX": prefix}):
        try:
            yield prefix
        finally:
            # Shard by shard: on a Redis Cluster each shard's keys are on their own primary,
            # and one DEL may only name keys of one slot.
            for shard in shards.numbers():
                client = shards.client(shard)
                tag = shards.keys(shard).tag
                keys = list(client.scan_iter(f"{tag}*", count=1000))
                for i in range(0, len(keys), 500):  # only this test's keys, never a FLUSHDB
                    client.delete(*keys[i : i + 500])


@pytest.fixture
def dtq_queue(dtq_keys: str) -> DtqQueue:
    """Run queued tasks in this process and assert on enqueued ones, with private keys."""
    return DtqQueue(dtq_keys)
