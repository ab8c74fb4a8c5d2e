"""django.tasks on dtq without worker processes: mapping, validation, options, on-commit,
the test backends and dtq.testing (tasks run in this process through the real scripts)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction

import dtq
from dtq.backends import DtqBackend, DtqTask, DtqTaskResult, result_from_record
from dtq.compat import (
    TASK_TAKES_OPTIONS,
    TASKS_MODULE,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from dtq.engine import read_side
from dtq.engine.errors import IdempotencyInProgress, TaskCancelled, TaskExpired
from dtq.engine.state import TaskState
from dtq.testing import run_queued
from tests.testapp import django_tasks as dj
from tests.testapp import tasks as native_tasks

needs_options = pytest.mark.skipif(
    not TASK_TAKES_OPTIONS, reason="@task(**options) needs Django 6.1 or the 5.2 backport"
)
TASK_ID = "01m8kbtgrh00ckn0zaq6cx"


def backend_settings(backend: str = "DtqBackend", **options: Any) -> dict[str, Any]:
    """Return a TASKS setting with one backend of dtq.backends."""
    return {"default": {"BACKEND": f"dtq.backends.{backend}", "QUEUES": [], "OPTIONS": options}}


@pytest.fixture
def sent() -> Any:
    """Record (signal, status, sender) for every django.tasks signal sent in this process."""
    rows: list[tuple[str, str, str, str]] = []

    def receiver(signal_name: str) -> Any:
        def record(sender: type, task_result: Any, **kwargs: Any) -> None:
            rows.append((signal_name, task_result.id, str(task_result.status), sender.__name__))

        return record

    handlers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    for signal, handler in handlers.items():
        signal.connect(handler)
    yield rows
    for signal, handler in handlers.items():
        signal.disconnect(handler)


# ----- status mapping (pure) -----------------------------------------------------------------


def record(state: str, **extra: Any) -> dict[str, Any]:
    """Return a decoded task record as read_side.get_task returns it."""
    base = {
        "id": TASK_ID,
        "state": state,
        "payload": {"args": [1], "kwargs": {"b": 2}},
        "created_at": 1_700_000_000.0,
        "started_at": None,
        "finished_at": None,
        "attempt": 0,
        "max_attempts": 3,
        "history": [],
        "result": None,
        "error": None,
    }
    return base | extra


FAILED_ATTEMPT = {
    "attempt": 1,
    "worker": "w1",
    "outcome": "failed",
    "error": "builtins.ValueError",
    "message": "bad",
    "traceback": "Traceback...\nValueError: bad\n",
}


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("PENDING", "READY"),
        ("QUEUED", "READY"),
        ("RETRYING", "READY"),
        ("RUNNING", "RUNNING"),
        ("SUCCEEDED", "SUCCESSFUL"),
        ("FAILED", "FAILED"),
        ("DEAD_LETTERED", "FAILED"),
        ("CANCELLED", "FAILED"),
        ("EXPIRED", "FAILED"),
    ],
)
def test_every_dtq_state_maps_to_a_django_status(state, status):
    result = result_from_record(dj.add, record(state), "default")
    assert (result.status, result.state) == (status, state)
    assert (result.args, result.kwargs) == ([1], {"b": 2})
    assert result.is_finished == (status in ("SUCCESSFUL", "FAILED"))
    if status == "FAILED":
        assert result.errors, "a failed result always says why"
        assert issubclass(result.errors[-1].exception_class, BaseException)


def test_mapping_keeps_history_workers_errors_and_return_value():
    running = record(
        "RUNNING", attempt=2, worker="w2", started_at=1_700_000_005.0, history=[FAILED_ATTEMPT]
    )
    result = result_from_record(dj.add, running, "default")
    assert (result.worker_ids, result.attempt, result.attempts) == (["w1", "w2"], 2, 2)
    assert [e.exception_class for e in result.errors] == [ValueError]
    assert result.finished_at is None and result.started_at.timestamp() == 1_700_000_005.0
    done = result_from_record(dj.add, record("SUCCEEDED", result={"x": [1]}), "default")
    assert done.return_value == {"x": [1]}


def test_failures_without_an_attempt_record_a_dtq_exception():
    expired = result_from_record(dj.add, record("EXPIRED"), "default")
    assert [e.exception_class for e in expired.errors] == [TaskExpired]
    cancelled = result_from_record(
        dj.add, record("CANCELLED", cancel_reason="operator said so"), "default"
    )
    assert cancelled.errors[-1].exception_class is TaskCancelled
    assert "operator said so" in cancelled.errors[-1].traceback
    lost = {"attempt": 3, "outcome": "lost", "error": "dtq.WorkerLost", "message": "gone"}
    dead = result_from_record(dj.add, record("DEAD_LETTERED", history=[lost]), "default")
    assert dead.errors[-1].exception_class_path == "dtq.engine.errors.WorkerLost"
    assert dead.errors[-1].exception_class is dtq.engine.errors.WorkerLost


# ----- validation ------------------------------------------------------------------------------


def local_function_task() -> Any:
    def inner() -> None: ...

    return task(queue_name="tests")(inner)


def no_context_arg(value: int) -> None:
    """Not a valid takes_context task: its first parameter is not `context`."""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (local_function_task, "module level"),
        (lambda: task(takes_context=True, queue_name="tests")(no_context_arg), "context"),
        (lambda: dj.add.using(priority=101), "priority"),
        (lambda: dj.add.using(queue_name="no spaces"), "invalid queue name"),
        (lambda: dj.add.using(run_after=datetime(2030, 1, 1)), "aware"),
        (lambda: dj.add.using(max_attempts=0), "max_attempts"),
        (lambda: dj.add.using(ttl=-1), "ttl"),
        (lambda: dj.add.using(timeout=0), "timeout"),
        (lambda: dj.add.using(retry_jitter=2.0), "retry_jitter"),
        (lambda: dj.add.using(idempotency_key="no spaces"), "idempotency_key"),
        (lambda: dj.add.using(database="nope"), "DATABASES"),
        (lambda: dataclasses.replace(dj.add, retry_on=(int,)), "retry_on"),
    ],
)
def test_invalid_tasks_raise_invalid_task(make, message):
    with pytest.raises(InvalidTask, match=message):
        make()


def test_queue_names_are_checked_against_queues(settings):
    settings.TASKS = {
        "default": {"BACKEND": "dtq.backends.DtqBackend", "QUEUES": ["emails"], "OPTIONS": {}}
    }
    assert dj.add.using(queue_name="emails").queue_name == "emails"
    with pytest.raises(InvalidTask, match="Queue 'tests' is not valid"):
        dj.add.using(priority=1)


def test_an_invalid_task_fails_its_module_import(tmp_path, monkeypatch):
    (tmp_path / "dtq_bad_tasks_module.py").write_text(
        f"from {TASKS_MODULE} import task\n\n\n"
        "@task(queue_name='has spaces')\n"
        "def send() -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidTask, match="invalid queue name"):
        importlib.import_module("dtq_bad_tasks_module")


def test_using_accepts_dtq_options_and_rejects_unknown_ones():
    variant = dj.add.using(priority=5, max_attempts=7, ttl=60, idempotency_key="k-1")
    assert isinstance(variant, DtqTask)
    assert (variant.priority, variant.max_attempts, variant.ttl) == (5, 7, 60)
    assert variant.func is dj.add.func and dj.add.max_attempts is None
    with pytest.raises(TypeError, match="retry_on"):
        dj.add.using(retry_on=(ValueError,))


@needs_options
def test_task_decorator_makes_a_dtq_task_with_options():
    assert isinstance(dj.configured, DtqTask)
    assert (dj.configured.max_attempts, dj.configured.retry_on) == (2, (ValueError,))
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(queue_name="tests", max_attempts=0)(no_context_arg)
    with pytest.raises(InvalidTask, match="timeout"):
        task(queue_name="tests", timeout="30")(no_context_arg)


@needs_options
def test_task_decorator_names_an_unknown_option_at_definition_time():
    with pytest.raises(TypeError, match=r"no_context_arg: unknown task option\(s\) max_attempt;"):
        task(queue_name="tests", max_attempt=5)(no_context_arg)


def test_check_reports_unknown_and_invalid_options(settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "dtq.backends.DtqBackend",
            "QUEUES": ["ok", "not ok"],
            "OPTIONS": {"BOGUS": 1, "ENQUEUE_ON_COMMIT": "yes", "DATABASE": "nope"},
        }
    }
    errors = task_backends["default"].check()
    assert sorted(e.id for e in errors) == ["dtq.E101", "dtq.E102", "dtq.E103", "dtq.E104"]
    assert "BOGUS" in next(e.msg for e in errors if e.id == "dtq.E101")
    settings.TASKS = backend_settings(ENQUEUE_ON_COMMIT=True)
    assert task_backends["default"].check() == []


# ----- enqueue and results in this process ---------------------------------------------------


def test_enqueue_sends_task_enqueued_once_and_maps_priority_to_bands(dtq_env, sent):
    bands = {}
    for priority in (100, 34, 33, -33, -34, -100):
        result = dj.add.using(priority=priority).enqueue(1, 2)
        bands[priority] = read_side.get_task(result.id)["band"]
    assert bands == {100: 0, 34: 0, 33: 1, -33: 1, -34: 2, -100: 2}
    assert [(s[0], s[2], s[3]) for s in sent] == [("enqueued", "READY", "DtqBackend")] * 6


def test_arguments_must_be_json(dtq_env):
    with pytest.raises(TypeError):
        dj.add.enqueue(object(), 1)
    assert read_side.queue_names() == []  # nothing was written


def test_idempotency_key_maps_to_one_logical_task(dtq_env, sent):
    keyed = dj.add.using(idempotency_key="sum-1-2")
    first = keyed.enqueue(1, 2)
    with pytest.raises(IdempotencyInProgress):
        keyed.enqueue(1, 2)
    run_queued()
    again = keyed.enqueue(1, 2)  # finished: the stored task is replayed, nothing enqueued
    assert (again.id, again.duplicate, again.return_value) == (first.id, True, 3)
    assert [s[0] for s in sent] == ["enqueued", "started", "finished"]


def test_get_result_errors(dtq_env):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(TASK_ID)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("not-an-id")
    native = native_tasks.record.enqueue(1)  # a dtq.task, not a django task
    with pytest.raises(TaskResultDoesNotExist, match="not a django task"):
        default_task_backend.get_result(native.id)
    added = dj.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        dj.boom.get_result(added.id)
    assert dj.add.get_result(added.id).id == added.id


def test_run_queued_runs_tasks_here_through_the_engine(dtq_env, sent):
    result = dj.add.enqueue(2, 2)
    assert run_queued("tests") == [result.id]
    result.refresh()
    assert (result.status, result.return_value, result.attempt) == ("SUCCESSFUL", 4, 1)
    assert result.worker_ids[0].startswith("testing.")
    assert [s[0] for s in sent] == ["enqueued", "started", "finished"]
    assert run_queued() == []


def test_run_queued_follows_retries_that_are_due(dtq_env):
    result = dj.flaky.enqueue(1, delay=0.0)
    assert run_queued() == [result.id]
    result.refresh()
    assert (result.status, result.state) == (TaskResultStatus.READY, TaskState.RETRYING)
    assert run_queued() == [result.id]
    result.refresh()
    assert (result.status, result.return_value, result.attempt) == ("SUCCESSFUL", 2, 2)


def test_async_api_in_process(dtq_env):
    result = asyncio.run(dj.async_double.aenqueue(5))
    assert isinstance(result, DtqTaskResult)
    run_queued()
    asyncio.run(result.arefresh())
    assert (result.status, result.return_value) == ("SUCCESSFUL", 10)


# ----- on commit ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_waits_for_the_commit_and_drops_on_rollback(dtq_env, sent):
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = dj.add.enqueue_on_commit(1, 2)
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        dropped.refresh()
    with transaction.atomic():
        kept = dj.add.enqueue_on_commit(3, 4)
        assert (kept.status, kept.enqueued_at) == (TaskResultStatus.READY, None)
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(kept.id)
    assert kept.enqueued_at is not None
    assert sent == [("enqueued", kept.id, "READY", "DtqBackend")]
    assert run_queued("tests") == [kept.id]
    kept.refresh()
    assert kept.return_value == 7


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_option_makes_it_the_default(dtq_env, settings):
    settings.TASKS = backend_settings(ENQUEUE_ON_COMMIT=True)
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = dj.add.enqueue(1, 2)
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        dropped.refresh()
    kept = dj.add.enqueue(1, 2)  # no transaction: enqueued at once
    kept.refresh()
    assert kept.state == TaskState.QUEUED
    from_async = asyncio.run(dj.add.aenqueue(5, 5))
    from_async.refresh()
    assert from_async.state == TaskState.QUEUED


@pytest.mark.django_db
def test_run_queued_works_with_captured_on_commit_callbacks(
    dtq_env, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = dj.create_user.enqueue_on_commit("ada")
        assert run_queued() == []  # not before the commit
    assert run_queued() == [result.id]
    result.refresh()
    # The task ran on this thread, inside the test's transaction.
    assert User.objects.get(username="ada").pk == result.return_value


# ----- backends for tests -------------------------------------------------------------------


def test_immediate_backend_runs_the_same_task_code(settings, sent):
    settings.TASKS = backend_settings("DtqImmediateBackend")
    result = dj.add.using(max_attempts=2, run_after=datetime.now().astimezone()).enqueue(1, 2)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
    context = dj.with_context.enqueue("x").return_value
    assert (context["attempt"], context["status"]) == (1, "RUNNING")
    failed = dj.boom.enqueue()
    assert failed.errors[0].exception_class is ValueError
    assert {s[3] for s in sent} == {"DtqImmediateBackend"}


def test_dummy_backend_stores_without_running(settings):
    settings.TASKS = backend_settings("DtqDummyBackend")
    result = dj.add.using(timeout=5).enqueue(1, 2)
    assert result.status == TaskResultStatus.READY
    assert default_task_backend.get_result(result.id).args == [1, 2]
    with pytest.raises(InvalidTask, match="invalid queue name"):
        dj.add.using(queue_name="no spaces")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("backend", ["DtqImmediateBackend", "DtqDummyBackend"])
def test_test_backends_honour_on_commit(settings, backend):
    settings.TASKS = backend_settings(backend)
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = dj.add.enqueue_on_commit(1, 2)
        raise RuntimeError("roll back")
    with transaction.atomic():
        kept = dj.add.enqueue_on_commit(1, 2)
        assert kept.enqueued_at is None
    assert dropped.enqueued_at is None and kept.enqueued_at is not None


def test_backend_class_flags():
    backend = task_backends["default"]
    assert isinstance(backend, DtqBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert backend.task_class is DtqTask


def test_run_after_in_the_past_runs_now(dtq_env):
    result = dj.add.using(run_after=datetime.now().astimezone() - timedelta(hours=1)).enqueue(1, 1)
    assert result.state == TaskState.QUEUED
