"""django.tasks on dtq, end to end: standard @task code run by real dtq_worker processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import dtq
from dtq.backends import DtqBackend, DtqTaskResult
from dtq.compat import (
    TASK_TAKES_OPTIONS,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_enqueued,
)
from dtq.engine.state import TaskState
from dtq.engine.submit import Submission, submit
from tests.conftest import ROOT, Env, wait_for
from tests.testapp import django_tasks as dj

pytestmark = pytest.mark.slow
needs_options = pytest.mark.skipif(
    not TASK_TAKES_OPTIONS, reason="@task(**options) needs Django 6.1 or the 5.2 backport"
)


def finished(result: Any) -> Any:
    """Return a condition that holds once the result is SUCCESSFUL or FAILED."""

    def check() -> bool:
        result.refresh()
        return bool(result.is_finished)

    return check


def signals(env: Env, task_id: str) -> list[dict[str, Any]]:
    """Return the django.tasks signals the worker witnessed for one task, in order."""
    return [row for row in env.witnessed("dj_signal") if row["id"] == task_id]


def read_in_another_process(env: Env, task_id: str) -> dict[str, Any]:
    """Read a result through get_result in a fresh Django process."""
    code = (
        "import json; from dtq.compat import default_task_backend as b; "
        f"r = b.get_result({task_id!r}); "
        "print(json.dumps({'status': r.status, 'value': r.return_value, 'state': r.state, "
        "'attempt': r.attempt, 'workers': r.worker_ids}))"
    )
    out = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        cwd=ROOT,
        env=env.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_enqueue_runs_on_a_worker_and_the_result_reads_from_any_process(dtq_env):
    result = dj.add.enqueue(2, 3)
    assert isinstance(result, DtqTaskResult)
    assert (result.status, result.state, result.attempt) == ("READY", "QUEUED", 0)
    dtq_env.worker()
    wait_for(finished(result))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert (result.return_value, result.state, result.attempt) == (5, "SUCCEEDED", 1)
    assert result.errors == [] and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    other = read_in_another_process(dtq_env, result.id)
    assert other == {
        "status": "SUCCESSFUL",
        "value": 5,
        "state": "SUCCEEDED",
        "attempt": 1,
        "workers": result.worker_ids,
    }


def test_failure_is_failed_with_its_traceback(dtq_env):
    result = dj.boom.using(max_attempts=1).enqueue("kaboom")
    dtq_env.worker()
    wait_for(finished(result))
    assert result.status == TaskResultStatus.FAILED
    assert result.state == TaskState.DEAD_LETTERED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "ValueError: kaboom" in error.traceback
    assert "in boom\n    raise ValueError(message)" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_retries_read_as_ready_between_attempts(dtq_env):
    result = dj.flaky.enqueue(1, delay=1.0)
    dtq_env.worker("--with-scheduler")

    def retrying() -> bool:
        result.refresh()
        return result.state == TaskState.RETRYING

    wait_for(retrying)
    assert result.status == TaskResultStatus.READY
    assert (result.attempt, len(result.worker_ids)) == (1, 1)
    assert [e.exception_class_path for e in result.errors] == ["dtq.engine.errors.RetryableError"]
    wait_for(finished(result))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert (result.return_value, result.attempt, len(result.worker_ids)) == (2, 2, 2)
    assert len(result.errors) == 1  # the failed first attempt stays in the history


def test_signals_fire_once_per_event_in_the_worker(dtq_env):
    ok = dj.add.enqueue(1, 1)
    bad = dj.boom.using(max_attempts=1).enqueue()
    retried = dj.flaky.enqueue(1, delay=0.0)
    dtq_env.worker("--with-scheduler")
    for result in (ok, bad, retried):
        wait_for(finished(result))
    wait_for(lambda: len(dtq_env.witnessed("dj_signal")) >= 7)
    rows = {r.id: signals(dtq_env, r.id) for r in (ok, bad, retried)}
    assert [(s["signal"], s["status"]) for s in rows[ok.id]] == [
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    assert [(s["signal"], s["status"], s["exc_info"]) for s in rows[bad.id]] == [
        ("started", "RUNNING", None),
        ("finished", "FAILED", "ValueError"),  # sent inside the handler: the log has the trace
    ]
    assert [(s["signal"], s["attempt"]) for s in rows[retried.id]] == [
        ("started", 1),
        ("started", 2),
        ("finished", 2),
    ]
    rows_all = [s for group in rows.values() for s in group]
    assert {s["sender"] for s in rows_all} == {"DtqBackend"}
    assert {s["pid"] for s in rows_all} == {dtq_env.procs[0].pid}  # sent by the worker


def test_async_task_and_async_api(dtq_env):
    sent = []

    def on_enqueued(sender: type, task_result: Any, **kwargs: Any) -> None:
        sent.append((sender, task_result.id))

    task_enqueued.connect(on_enqueued)
    try:
        result = asyncio.run(dj.async_double.aenqueue(21))
    finally:
        task_enqueued.disconnect(on_enqueued)
    assert sent == [(DtqBackend, result.id)]
    dtq_env.worker()

    async def poll() -> Any:
        for _ in range(750):
            fresh = await dj.async_double.aget_result(result.id)
            if fresh.is_finished:
                return fresh
            await asyncio.sleep(0.02)
        raise AssertionError("async task did not finish")

    fresh = asyncio.run(poll())
    assert (fresh.status, fresh.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert fresh.task.priority == 50


def test_takes_context_gets_a_django_task_context(dtq_env):
    result = dj.with_context.enqueue("v")
    dtq_env.worker()
    wait_for(finished(result))
    assert result.return_value == {
        "context": "DtqTaskContext",
        "id": result.id,
        "attempt": 1,
        "status": "RUNNING",
        "state": "RUNNING",
        "args": ["v"],
        "workers": 1,
        "value": "v",
    }


@pytest.mark.one_shard  # strict priority holds per shard
def test_priority_orders_execution_by_band(dtq_env):
    for priority, label in ((-50, "low"), (0, "mid"), (80, "high")):
        for i in range(3):
            dj.probe.using(priority=priority).enqueue(f"{label}{i}")
    assert dtq_env.worker("--concurrency", "1", "--burst").wait(30) == 0
    labels = [row["label"][:-1] for row in dtq_env.witnessed("dj_probe")]
    assert labels == ["high"] * 3 + ["mid"] * 3 + ["low"] * 3


def test_run_after_is_honoured(dtq_env):
    run_after = timezone.now() + timedelta(seconds=0.6)
    result = dj.add.using(run_after=run_after).enqueue(20, 22)
    assert (result.status, result.state) == ("READY", "PENDING")
    dtq_env.worker("--with-scheduler")
    wait_for(finished(result))
    assert result.return_value == 42
    assert result.started_at >= run_after - timedelta(milliseconds=5)  # ms clock resolution


def test_worker_runs_only_registered_tasks_never_a_path_from_redis(dtq_env):
    # A real, importable function of the tasks module that is not a task: never imported.
    accepted = submit(Submission(name=f"{dj.__name__}._ours", queue="tests", max_attempts=1))
    native = dtq.TaskResult(id=accepted.id)
    dtq_env.worker()
    wait_for(finished(native))
    assert native.state == TaskState.DEAD_LETTERED
    assert "unknown task" in native.error["message"]
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(accepted.id)  # not a django task of this backend


@needs_options
def test_task_decorator_passes_dtq_options_through(dtq_env):
    retried = dj.configured.enqueue("value")
    not_retried = dj.configured.enqueue("type")
    dtq_env.worker("--with-scheduler")
    for result in (retried, not_retried):
        wait_for(finished(result))
    assert (retried.status, retried.attempt, retried.max_attempts) == ("FAILED", 2, 2)
    assert [e.exception_class for e in retried.errors] == [ValueError, ValueError]
    assert (not_retried.attempt, not_retried.errors[0].exception_class) == (1, TypeError)
