"""A BaseException from a handler (sys.exit() included) fails that attempt, never the worker."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import dtq
from dtq.compat import TaskResultStatus
from dtq.engine import codec, registry
from dtq.engine.executor import Attempt, Outcome, execute, report_finished, run_sync_attempt
from dtq.task import TaskContext
from tests.conftest import Env, wait_for
from tests.testapp import tasks

# Handlers run in this process close stale database connections first (_run_sync), which
# pytest-django allows only with database access.
pytestmark = pytest.mark.django_db

KINDS = {
    "exit": "builtins.SystemExit",
    "interrupt": "builtins.KeyboardInterrupt",
    "generator_exit": "builtins.GeneratorExit",
    "halt": "tests.testapp.tasks.Halt",
    "cancelled": "asyncio.exceptions.CancelledError",
}


def attempt_of(task: Any, *args: Any, name: str | None = None) -> Attempt:
    """An attempt as claim.lua hands it over, for a handler run in this process."""
    return Attempt(
        id="t-test",
        entry="1-0",
        queue_index=1,
        band=1,
        name=name or task.name,
        payload=codec.dumps({"args": list(args), "kwargs": {}}),
        attempt=1,
        max_attempts=2,
        timeout=None,
        retry="{}",
        idem="",
        queue="tests",
    )


def context_of(att: Attempt) -> TaskContext:
    return TaskContext(
        task_id=att.id,
        attempt=att.attempt,
        max_attempts=att.max_attempts,
        queue_name=att.queue,
        worker_id="w-test",
        deadline=None,
        _cancel=att.cancel,
    )


def assert_failed_with(outcome: Outcome, error_class: str) -> None:
    """The outcome is an ordinary failure that names the real class and keeps its traceback."""
    assert outcome.kind == "fail"  # BaseException is not in the default retry_on
    assert json.loads(outcome.data)["class"] == error_class
    entry = json.loads(outcome.history)
    assert (entry["outcome"], entry["error"]) == ("failed", error_class)
    assert error_class.rsplit(".", 1)[1] in entry["traceback"]
    assert "Traceback (most recent call last)" in entry["traceback"]


def no_stuck(att: Attempt, future: Any) -> None:
    raise AssertionError("no handler here has a timeout")


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="dtq-task") as executor:
        yield executor


@pytest.mark.parametrize("kind", list(KINDS))
def test_sync_fast_path_records_a_base_exception_as_the_attempts_failure(
    kind: str, pool: ThreadPoolExecutor
) -> None:
    att = attempt_of(tasks.bail, kind)

    outcome = pool.submit(run_sync_attempt, att, "w-test", context_of(att)).result(timeout=5)

    assert_failed_with(outcome, KINDS[kind])
    assert pool.submit(threading.get_ident).result(timeout=5)  # the pool still runs work


@pytest.mark.parametrize("kind", list(KINDS))
def test_async_path_records_a_base_exception_as_the_attempts_failure(
    kind: str, pool: ThreadPoolExecutor
) -> None:
    att = attempt_of(tasks.async_bail, kind)

    async def run() -> tuple[Outcome, str]:
        outcome = await execute(att, "w-test", context_of(att), pool, no_stuck)
        await asyncio.sleep(0)
        return outcome, "the loop carries on"

    outcome, after = asyncio.run(run())

    assert_failed_with(outcome, KINDS[kind])
    assert after == "the loop carries on"


def test_sync_handler_with_a_timeout_records_sys_exit_as_a_failure(
    pool: ThreadPoolExecutor,
) -> None:
    att = attempt_of(tasks.bail, "exit")
    att.timeout = 5.0  # not the fast path: run_in_executor under wait_for

    outcome = asyncio.run(execute(att, "w-test", context_of(att), pool, no_stuck))

    assert_failed_with(outcome, "builtins.SystemExit")


def test_a_shutdown_cancel_still_leaves_the_attempt_for_the_reaper(
    pool: ThreadPoolExecutor,
) -> None:
    att = attempt_of(tasks.async_cancellable, 5.0)

    async def run() -> None:
        running = asyncio.create_task(execute(att, "w-test", context_of(att), pool, no_stuck))
        await asyncio.sleep(0.05)
        running.cancel()  # what asyncio.run does to tasks left at the worker's stop
        await running

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run())


class Hooked:
    """A registry entry with started/finished hooks (the path dtq.backends' tasks take)."""

    def __init__(self, task: Any, exit_in_started: bool = False) -> None:
        self.task = task
        self.name = f"{task.name}.hooked"
        self.exit_in_started = exit_in_started
        self.seen: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def started(self, att: Attempt, worker_id: str, context: Any) -> Any:
        self.seen.append("started")
        if self.exit_in_started:
            raise SystemExit("a task_started receiver called sys.exit()")
        return context

    def finished(self, att: Attempt, worker_id: str, outcome: Outcome, state: str) -> None:
        self.seen.append(f"finished:{outcome.kind}:{state}")


@pytest.fixture
def hooked() -> Iterator[Any]:
    made: list[Hooked] = []

    def make(task: Any, **options: Any) -> Hooked:
        entry = Hooked(task, **options)
        registry.register(entry)
        made.append(entry)
        return entry

    yield make
    for entry in made:
        registry._tasks.pop(entry.name, None)


@pytest.mark.parametrize("task", [tasks.bail, tasks.async_bail], ids=["sync", "async"])
def test_hooks_path_records_sys_exit_as_a_failure_and_runs_finished(
    task: Any, hooked: Any, pool: ThreadPoolExecutor
) -> None:
    entry = hooked(task)
    att = attempt_of(task, "exit", name=entry.name)

    outcome = asyncio.run(execute(att, "w-test", context_of(att), pool, no_stuck))

    assert_failed_with(outcome, "builtins.SystemExit")
    assert entry.seen == ["started"]  # finished waits for what finalize.lua decides
    report_finished(att, "w-test", outcome, "DEAD_LETTERED")
    assert entry.seen == ["started", "finished:fail:DEAD_LETTERED"]


def test_an_exception_whose_str_raises_is_still_recorded(pool: ThreadPoolExecutor) -> None:
    att = attempt_of(tasks.unprintable)

    outcome = pool.submit(run_sync_attempt, att, "w-test", context_of(att)).result(timeout=5)

    assert outcome.kind == "retry"  # an ordinary Exception, with an attempt left
    assert json.loads(outcome.data) == {
        "class": "tests.testapp.tasks.Unprintable",
        "message": "<Unprintable: str() failed>",
    }


def test_a_hook_that_calls_sys_exit_is_logged_and_the_attempt_runs(
    hooked: Any, pool: ThreadPoolExecutor
) -> None:
    entry = hooked(tasks.record, exit_in_started=True)
    att = attempt_of(tasks.record, "value", name=entry.name)

    outcome = asyncio.run(execute(att, "w-test", context_of(att), pool, no_stuck))

    assert (outcome.kind, outcome.data) == ("success", '"value"')
    assert entry.seen == ["started"]


def finished(result: dtq.TaskResult) -> Any:
    def check() -> bool:
        result.refresh()
        return result.is_finished

    return check


@pytest.mark.slow
def test_sys_exit_in_a_handler_fails_it_and_the_worker_runs_on(dtq_env: Env) -> None:
    worker = dtq_env.worker("--concurrency", "4", "--with-scheduler")
    holds = [tasks.hold.enqueue(1.5) for _ in range(2)]
    wait_for(lambda: len(dtq_env.witnessed("hold")) == 2)  # in flight beside the poison pill
    bailed = [tasks.bail.enqueue("exit"), tasks.async_bail.enqueue("exit")]
    for result in bailed:
        wait_for(finished(result))
    halted = tasks.halts.enqueue()
    after = tasks.record.enqueue("after")
    for result in [*holds, halted, after]:
        wait_for(finished(result))

    assert worker.poll() is None
    for result in bailed:
        assert (result.state, result.attempt) == (dtq.TaskState.DEAD_LETTERED, 1)
        assert result.error["class"] == "builtins.SystemExit"
        assert "SystemExit: 3" in result.history[-1]["traceback"]
    for result in holds:
        assert (result.state, result.attempt, result.return_value) == ("SUCCEEDED", 1, "held")
    assert (halted.state, halted.attempt, halted.return_value) == ("SUCCEEDED", 2, 2)
    assert halted.history[0]["error"] == "tests.testapp.tasks.Halt"  # retried by retry_on
    assert (after.state, after.return_value) == (dtq.TaskState.SUCCEEDED, "after")
    assert dtq_env.stats().get("reclaimed", 0) == 0


@pytest.mark.slow
def test_a_django_task_calling_sys_exit_is_failed_with_systemexit(dtq_env: Env) -> None:
    result = tasks.dj_exits.enqueue()
    worker = dtq_env.worker()

    def done() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_for(done)

    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [SystemExit]
    assert "SystemExit: 1" in result.errors[0].traceback
    assert worker.poll() is None


@pytest.mark.slow
@pytest.mark.parametrize("task", [tasks.poison, tasks.async_poison], ids=["sync", "async"])
def test_an_outcome_the_executor_cannot_build_fails_the_task_clearly(
    dtq_env: Env, task: Any
) -> None:
    # A retry policy that is not JSON (a damaged record): building the retry outcome raised
    # inside the executor, so the attempt was never finalized and its lease renewed for good.
    result = task.enqueue()
    dtq_env.client.hset(dtq_env.keys.task(result.id), "retry", "not json")
    worker = dtq_env.worker()
    wait_for(finished(result))

    assert (result.state, result.attempt) == (dtq.TaskState.DEAD_LETTERED, 1)
    assert result.error["class"] == "dtq.PermanentError"
    assert "could not record this attempt's outcome" in result.error["message"]
    assert worker.poll() is None
