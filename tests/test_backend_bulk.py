"""django.tasks bulk enqueue on dtq: DtqBackend.enqueue_many and the dtq.backends helpers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.db import transaction

import dtq
from dtq.backends import DtqTaskResult, aenqueue_many, enqueue_many
from dtq.compat import InvalidTask, TaskResultDoesNotExist, TaskResultStatus, task_enqueued
from dtq.engine.state import TaskState
from dtq.testing import run_queued
from tests.testapp import django_tasks as dj


def backend_settings(backend: str = "DtqBackend", **options: Any) -> dict[str, Any]:
    """Return a TASKS setting with one backend of dtq.backends."""
    return {"default": {"BACKEND": f"dtq.backends.{backend}", "QUEUES": [], "OPTIONS": options}}


@pytest.fixture
def enqueued() -> Any:
    """Collect the ids of task_enqueued signals sent in this process."""
    ids: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        ids.append(task_result.id)

    task_enqueued.connect(receiver)
    yield ids
    task_enqueued.disconnect(receiver)


def test_enqueue_many_submits_every_call_and_they_run(dtq_env, enqueued):
    results = enqueue_many(dj.add, [((i, 1), {}) for i in range(3)] + [((), {"a": 5, "b": 5})])
    assert all(isinstance(r, DtqTaskResult) for r in results)
    assert [(r.status, r.state) for r in results] == [("READY", TaskState.QUEUED)] * 4
    assert enqueued == [r.id for r in results]
    assert sorted(run_queued("tests")) == sorted(r.id for r in results)
    for r in results:
        r.refresh()
    assert [r.return_value for r in results] == [1, 2, 3, 10]


def test_aenqueue_many_from_async_code(dtq_env, enqueued):
    results = asyncio.run(aenqueue_many(dj.add, [((i, i), {}) for i in range(3)]))
    assert [r.state for r in results] == [TaskState.QUEUED] * 3
    assert enqueued == [r.id for r in results]


def test_an_invalid_item_submits_nothing(dtq_env):
    with pytest.raises(dtq.BulkSubmitError, match="item 1") as info:
        enqueue_many(dj.add, [((1, 2), {}), (("x" * 600_000, 1), {})])
    assert list(info.value.errors) == [1]
    assert run_queued("tests") == []


def test_a_malformed_item_is_invalid_task(dtq_env):
    with pytest.raises(InvalidTask, match="item 0: expected an \\(args, kwargs\\) pair"):
        enqueue_many(dj.add, [(1, 2, 3)])


@pytest.mark.one_shard  # QUEUE_MAX_DEPTH counts per shard
def test_a_full_queue_refuses_the_rest(dtq_env):
    dtq_env.configure(QUEUE_MAX_DEPTH={"tests": 1})
    with pytest.raises(dtq.BulkSubmitError, match="1 of 2 submissions refused") as info:
        enqueue_many(dj.add, [((1, 1), {}), ((2, 2), {})])
    assert isinstance(info.value.errors[1], dtq.QueueFull)
    assert info.value.results[0].state == TaskState.QUEUED


@pytest.mark.django_db(transaction=True)
def test_with_enqueue_on_commit_nothing_is_sent_before_the_commit(dtq_env, settings, enqueued):
    settings.TASKS = backend_settings(ENQUEUE_ON_COMMIT=True)
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = enqueue_many(dj.add, [((1, 2), {})])
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        dropped[0].refresh()
    with transaction.atomic():
        kept = enqueue_many(dj.add, [((3, 4), {}), ((5, 6), {})])
        assert [(r.status, r.enqueued_at) for r in kept] == [(TaskResultStatus.READY, None)] * 2
        assert run_queued("tests") == []
    assert all(r.enqueued_at is not None for r in kept)
    assert enqueued == [r.id for r in kept]
    assert sorted(run_queued("tests")) == sorted(r.id for r in kept)


def test_other_backends_enqueue_one_by_one(dtq_env, settings):
    settings.TASKS = backend_settings("DtqImmediateBackend")
    results = enqueue_many(dj.add, [((1, 2), {}), ((3, 4), {})])
    assert [r.return_value for r in results] == [3, 7]
