"""DtqBackend against what django.tasks expects of any backend, checked with real workers.

Each test states one promise of Django's tasks documentation or of its own backends' test
suite (Django 6.1's tests/tasks/), in dtq's words, and runs it on DtqBackend: enqueue in this
process, a dtq_worker process runs the task, the result is read back from Redis. Where
Django's ImmediateBackend is the reference (argument and return value encoding), the same
task runs on both and the outcomes are compared. docs/django-tasks.md lists the deliberate
differences (tested here too), and `make django-suite` runs Django's own suite itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle
import sys
from datetime import datetime, timedelta
from typing import Any

import django
import pytest
from django.db import transaction
from django.utils import timezone

from dtq.backends import DtqTaskResult, UnresolvedException, result_from_record
from dtq.compat import (
    TASKS_MODULE,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task_backends,
)
from dtq.engine import read_side
from tests.conftest import Env, wait_for
from tests.testapp import django_tasks as dj

IMMEDIATE = {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend", "QUEUES": []}


def run_all(env: Env, *results: Any, burst: bool = True) -> None:
    """Run a dtq worker until its queue is empty (or, not burst, the results finish)."""
    if burst:
        assert env.worker("--burst").wait(60) == 0
    else:
        env.worker("--with-scheduler")  # deferred tasks: --burst may stop before they are due
    for result in results:
        wait_for(lambda r=result: r.refresh() or r.is_finished)


def ms_precise(moment: datetime | None) -> bool:
    """Return True for a time with whole milliseconds (Redis' precision)."""
    return moment is not None and moment.microsecond % 1000 == 0


@pytest.fixture
def with_immediate(settings: Any) -> None:
    """Add Django's own ImmediateBackend as the 'immediate' backend, beside DtqBackend."""
    settings.TASKS = {**settings.TASKS, "immediate": IMMEDIATE}


# ----- an enqueued result ---------------------------------------------------------------------


def test_enqueue_returns_a_ready_result_that_reads_back_unchanged(dtq_env):
    result = dj.echo.enqueue(1, two=3)
    assert isinstance(result, DtqTaskResult)
    assert (result.status, result.is_finished, result.attempts) == ("READY", False, 0)
    assert (result.task, result.args, result.kwargs) == (dj.echo, [1], {"two": 3})
    assert (result.backend, result.errors, result.worker_ids) == ("default", [], [])
    assert result.started_at is result.last_attempted_at is result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    # One clock (Redis') and one precision (ms): what enqueue() returns is what Redis holds.
    assert ms_precise(result.enqueued_at)
    assert result == default_task_backend.get_result(result.id)
    assert result == dj.echo.get_result(result.id)
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_async_enqueue_reads_back_unchanged(dtq_env):
    async def scenario() -> None:
        result = await dj.async_double.aenqueue(4)
        assert result == await default_task_backend.aget_result(result.id)
        before = dataclasses.asdict(result)
        await result.arefresh()
        assert dataclasses.asdict(result) == before
        with pytest.raises(TaskResultDoesNotExist):
            await dj.async_double.aget_result("123")

    asyncio.run(scenario())


def test_a_deferred_task_reads_back_its_run_after(dtq_env):
    wanted = timezone.now() + timedelta(seconds=0.5)
    result = dj.add.using(run_after=wanted).enqueue(1, 2)
    assert (result.status, result.state) == ("READY", "PENDING")
    # Redis' clock and precision: within the clock difference of this host and Redis.
    assert ms_precise(result.task.run_after)
    assert abs(result.task.run_after - wanted) < timedelta(seconds=1)
    stored = default_task_backend.get_result(result.id)
    assert stored.task.run_after == result.task.run_after
    assert stored == result
    run_all(dtq_env, result, burst=False)
    assert result.return_value == 3
    assert result.started_at >= stored.task.run_after  # one clock: never early


def test_a_run_after_already_past_runs_at_once_and_reads_as_not_deferred(dtq_env):
    result = dj.add.using(run_after=timezone.now() - timedelta(hours=1)).enqueue(1, 1)
    assert (result.state, result.task.run_after) == ("QUEUED", None)
    assert default_task_backend.get_result(result.id) == result


@pytest.mark.skipif(django.VERSION < (6, 1), reason="tasks pickle from Django 6.1 on")
def test_results_pickle_like_djangos(dtq_env):
    result = dj.add.using(priority=10).enqueue(1, 2)
    assert pickle.loads(pickle.dumps(result)) == result


def test_results_compare_like_djangos(dtq_env):
    result = dj.add.using(priority=10).enqueue(1, 2)
    other = dj.add.enqueue(1, 2)
    assert result != other and result.task != other.task
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        dj.echo.get_result(result.id)


@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_a_transaction_does_not_wait_for_the_commit(dtq_env):
    with transaction.atomic():
        result = dj.add.enqueue(2, 2)
        assert result.enqueued_at is not None
        assert read_side.get_task(result.id) is not None


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_stamps_the_result_when_redis_accepts_it(dtq_env):
    with transaction.atomic():
        result = dj.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue_on_commit(1, 2)
        assert (result.enqueued_at, result.status) == (None, "READY")
    assert ms_precise(result.enqueued_at) and ms_precise(result.task.run_after)
    assert result == default_task_backend.get_result(result.id)


def test_task_enqueued_is_logged_with_the_id(dtq_env, caplog):
    with caplog.at_level("DEBUG", logger=TASKS_MODULE):
        result = dj.add.enqueue(1, 1)
    [line] = [r.getMessage() for r in caplog.records if r.name == TASKS_MODULE]
    assert "enqueued" in line and result.id in line


# ----- what a worker leaves behind ------------------------------------------------------------


def test_a_run_on_a_worker_reads_like_djangos_backends(dtq_env):
    sync = dj.echo.enqueue(1, two=3)
    coroutine = dj.async_double.aenqueue(21)
    context = dj.with_context.enqueue("v")
    async_result = asyncio.run(coroutine)
    run_all(dtq_env, sync, async_result, context)
    for result in (sync, async_result, context):
        assert (result.status, result.is_finished, result.attempts) == ("SUCCESSFUL", True, 1)
        assert result.enqueued_at <= result.started_at <= result.finished_at
        assert result.last_attempted_at == result.started_at
        assert len(result.worker_ids) == 1 and result.errors == []
    assert sync.return_value == {"args": [1], "kwargs": {"two": 3}}
    assert (sync.task, sync.args, sync.kwargs) == (dj.echo, [1], {"two": 3})
    assert async_result.return_value == 42
    assert context.return_value["id"] == context.id  # context.task_result is this result
    assert context.return_value["attempt"] == 1


def test_failures_read_like_djangos_backends(dtq_env):
    failed = dj.boom.using(max_attempts=1).enqueue("it broke")
    nested = dj.nested_error.using(max_attempts=1).enqueue()
    run_all(dtq_env, failed, nested)
    for result in (failed, nested):
        assert (result.status, result.is_finished) == ("FAILED", True)
        assert result.enqueued_at <= result.started_at <= result.finished_at
        with pytest.raises(ValueError, match="Task failed"):
            result.return_value  # noqa: B018
        assert result._return_value is None
        assert result.errors[0].exception_class is ValueError
    assert failed.errors[0].traceback.endswith("ValueError: it broke\n")
    assert 'raise ValueError(ValueError("inner failure"))' in nested.errors[0].traceback


def test_an_unencodable_return_value_fails_with_the_real_error(dtq_env):
    result = dj.returns_function.enqueue()  # retries allowed: encoding is never retried
    run_all(dtq_env, result)
    assert (result.status, result.attempt) == ("FAILED", 1)
    [error] = result.errors
    assert error.exception_class is TypeError
    assert "TypeError: Unsupported type: <class 'function'>" in error.traceback
    assert result._return_value is None


@pytest.mark.parametrize(
    ("task", "cls"), [("exits", SystemExit), ("interrupted", KeyboardInterrupt)]
)
def test_a_base_exception_fails_the_task_not_the_worker(dtq_env, task, cls):
    # Django's ImmediateBackend lets KeyboardInterrupt through to its caller; a dtq worker has
    # no caller to hand it to, so it is that attempt's failure like any other.
    result = getattr(dj, task).using(max_attempts=1).enqueue()
    assert dtq_env.worker("--burst").wait(30) == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is cls


# ----- encoding: Django's rules, compared with Django's ImmediateBackend -----------------------


SAMPLES = [pytest.param(value, id=name) for name, value in dj.SAMPLES.items()]


def on_immediate(task: Any, *args: Any) -> tuple[str, Any]:
    """Return ('ok', the JSON text of its return value) or ('error', the exception class)."""
    result = task.using(backend="immediate").enqueue(*args)
    if result.status == TaskResultStatus.SUCCESSFUL:
        return "ok", json.loads(json.dumps(result.return_value))  # what a store gives back
    return "error", result.errors[0].exception_class


def enqueued(task: Any, *args: Any) -> tuple[str, Any]:
    """Enqueue on DtqBackend; return ('ok', result) or ('error', the exception class)."""
    try:
        return "ok", task.enqueue(*args)
    except Exception as exc:
        return "error", type(exc)


@pytest.mark.parametrize("value", SAMPLES)
def test_arguments_follow_djangos_rules(dtq_env, with_immediate, value):
    expected = enqueued(dj.echo.using(backend="immediate"), value)
    kind, got = enqueued(dj.echo, value)
    assert kind == expected[0]
    if kind == "error":
        assert got is expected[1]
        assert read_side.queue_names() == []  # refused before anything was written
        return
    run_all(dtq_env, got)
    assert got.return_value == on_immediate(dj.echo, value)[1]
    assert got.args == got.return_value["args"]  # the result shows what the handler got


@pytest.mark.parametrize("sample", dj.SAMPLES)
def test_return_values_follow_djangos_rules(dtq_env, with_immediate, sample):
    kind, expected = on_immediate(dj.give_back, sample)
    result = dj.give_back.enqueue(sample)
    run_all(dtq_env, result)
    if kind == "ok":
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == expected
    else:
        assert (result.status, result.attempt) == (TaskResultStatus.FAILED, 1)
        assert result.errors[0].exception_class is expected


@pytest.mark.parametrize(
    ("value", "cls", "message"),
    [
        ({1: "a", "1": "b"}, TypeError, "are one JSON key"),
        (float("nan"), ValueError, "NaN"),
        (2**64, TypeError, "beyond 64 bits"),
    ],
)
def test_values_json_text_would_change_are_refused(dtq_env, value, cls, message):
    # Deliberate: ImmediateBackend keeps these in memory; stored as JSON they would change.
    with pytest.raises(cls, match=message):
        dj.echo.enqueue(value)
    assert read_side.queue_names() == []


# ----- error classes are never imported from data ---------------------------------------------


def test_exception_class_resolves_only_what_is_already_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    module = "dtq_conformance_never_imported"
    (tmp_path / f"{module}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    history = [
        {"attempt": 1, "outcome": "failed", "error": f"{module}.Boom", "message": "m"},
        {"attempt": 2, "outcome": "failed", "error": "builtins.ValueError", "message": "m"},
        {"attempt": 3, "outcome": "failed", "error": "subprocess.run", "message": "m"},
    ]
    record = {"id": "01m8kbtgrh00ckn0zaq6cx", "state": "DEAD_LETTERED", "history": history}
    unknown, known, not_a_class = result_from_record(dj.add, record, "default").errors
    stand_in = unknown.exception_class
    assert issubclass(stand_in, UnresolvedException)
    assert (stand_in.__name__, stand_in.__module__) == ("Boom", module)
    assert unknown.exception_class is stand_in
    assert not marker.exists() and module not in sys.modules
    assert known.exception_class is ValueError
    with pytest.raises(ValueError, match="does not reference a valid exception"):
        not_a_class.exception_class  # noqa: B018


def test_backend_check_is_clean():
    assert task_backends["default"].check() == []
