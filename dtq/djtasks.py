"""dtq's django.tasks types: DtqTask, DtqTaskResult, DtqTaskContext, how a dtq task record
reads as a django TaskResult, and the worker registry entry that sends django.tasks' signals.

dtq.backends re-exports the public names; import them from there.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from functools import lru_cache, partial
from inspect import isclass, iscoroutinefunction
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from dtq.compat import (
    TASK_REFRESH_ATTRS,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_finished,
    task_started,
)
from dtq.djjson import to_json
from dtq.engine import codec, errors, ids, read_side
from dtq.engine.errors import PermanentError
from dtq.engine.firing import slot_of
from dtq.engine.progress import check
from dtq.engine.state import TaskState
from dtq.options import USING_OPTIONS as TASK_OPTIONS
from dtq.options import DeliveryOptions

log = logging.getLogger("dtq.backends")
READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED
STATUS_OF = {
    TaskState.PENDING: READY,
    TaskState.QUEUED: READY,
    TaskState.RETRYING: READY,
    TaskState.RUNNING: RUNNING,
    TaskState.SUCCEEDED: SUCCESSFUL,
    TaskState.FAILED: FAILED,
    TaskState.DEAD_LETTERED: FAILED,
    TaskState.CANCELLED: FAILED,
    TaskState.EXPIRED: FAILED,
}
# What DtqTask.using() takes beyond django's own; what @task(...) takes beyond django's own.
USING_OPTIONS = (TASK_OPTIONS - {"queue_name", "priority", "run_after"}) | {"database"}
DECORATOR_OPTIONS = USING_OPTIONS | {"retry_on"}


# ----- tasks, results, context --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DtqTask(Task, DeliveryOptions):
    """A django.tasks Task with dtq's delivery options (None: the DTQ settings' default)."""

    database: str | None = None  # alias whose commit enqueue_on_commit waits for

    def __new__(cls, *args: Any, **kwargs: Any) -> DtqTask:
        # @task(**options) (Django 6.1, the 5.2 backport) passes every option here: name the
        # unknown ones at definition time instead of the dataclass's bare "unexpected keyword".
        unknown = sorted(set(kwargs) - {f.name for f in fields(cls)})
        if unknown:
            func = kwargs.get("func")
            where = getattr(func, "__qualname__", cls.__name__)
            known = ", ".join(sorted(DECORATOR_OPTIONS))
            raise TypeError(f"{where}: unknown task option(s) {', '.join(unknown)}; dtq's: {known}")
        return object.__new__(cls)  # not super(): slots=True makes a new class

    def using(  # type: ignore[override]
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        **options: Any,
    ) -> DtqTask:
        """Return a copy with other defaults; also takes dtq's options (max_attempts, ttl...)."""
        unknown = sorted(set(options) - USING_OPTIONS)
        if unknown:
            raise TypeError(f"using() got unexpected option(s): {', '.join(unknown)}")
        changes: dict[str, Any] = dict(
            priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        changes.update(options)
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def s(self, *args: Any, **kwargs: Any) -> Any:
        """Return a signature (dtq.canvas): this task with bound arguments, for a workflow."""
        from dtq.canvas import Signature

        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Any:
        """Return an immutable signature: the previous step's result is not passed to it."""
        from dtq.canvas import Signature

        return Signature(self, args, kwargs, immutable=True)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> TaskResult | None:
        """Enqueue when the current transaction of `database` commits; nothing on rollback.

        dtq's backends return the (READY) result at once; other backends return None.
        """
        backend = self.get_backend()
        if hasattr(backend, "enqueue_on_commit"):
            return backend.enqueue_on_commit(self, args, kwargs)  # type: ignore[no-any-return]
        enqueue = partial(self.enqueue, *args, **kwargs)
        transaction.on_commit(enqueue, using=self.database or DEFAULT_DB_ALIAS)
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class DtqTaskResult(TaskResult):  # type: ignore[misc]  # the stubs miss frozen=True
    """A django.tasks TaskResult that also carries dtq's precise state and attempt."""

    state: TaskState = TaskState.QUEUED
    attempt: int = 0  # attempts started so far, counting crash redeliveries
    max_attempts: int = 0
    duplicate: bool = False  # an idempotency key returned an earlier task

    @property
    def attempts(self) -> int:  # type: ignore[override]
        """Return dtq's attempt count (django derives it from worker_ids)."""
        return self.attempt

    def refresh(self) -> None:
        """Reload the result from Redis."""
        self._take(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        """Reload the result from Redis, from async code."""
        self._take(await self.task.get_backend().aget_result(self.id))

    def _take(self, other: TaskResult) -> None:
        for name in (*TASK_REFRESH_ATTRS, "state", "attempt", "max_attempts"):
            object.__setattr__(self, name, getattr(other, name))


@dataclass(frozen=True, slots=True, kw_only=True)
class DtqTaskContext(TaskContext):  # type: ignore[misc]  # the stubs miss frozen=True
    """The django TaskContext a dtq worker passes, plus cancellation and progress reports."""

    cancel: threading.Event | None = field(default=None, repr=False, compare=False)
    scheduled_at: datetime | None = None  # the slot of a periodic firing (dtq.periodic)
    # The worker's dtq.TaskContext of this attempt: progress goes through its reporter.
    _dtq_context: Any = field(default=None, repr=False, compare=False)

    @property
    def cancel_requested(self) -> bool:
        """Return True once an operator asked for this task to be cancelled."""
        return self.cancel is not None and self.cancel.is_set()

    def progress(self, fraction: float, message: str = "") -> None:
        """Report how far this attempt got (0..1) on the task record, at a bounded rate."""
        if self._dtq_context is None:
            check(fraction, message)  # a context made outside a worker stores nothing
            return
        self._dtq_context.progress(fraction, message)

    async def aprogress(self, fraction: float, message: str = "") -> None:
        """Report progress from async code (the write runs off the event loop)."""
        check(fraction, message)  # a bad value raises here, in the caller's task
        await asyncio.to_thread(self.progress, fraction, message)


# ----- errors: classes resolved without importing anything ---------------------------------


class UnresolvedException(Exception):
    """Stands in for an error class of a task's history that this process has not imported."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DtqTaskError(TaskError):  # type: ignore[misc]  # the stubs miss frozen=True
    """A django TaskError whose exception_class never imports a path read from Redis."""

    @property
    def exception_class(self) -> type[BaseException]:
        """Return the class if this process already imported it, else a stand-in of that name."""
        found = _imported(self.exception_class_path)
        if found is None:
            return _stand_in(self.exception_class_path)
        if not (isclass(found) and issubclass(found, BaseException)):
            raise ValueError(f"{self.exception_class_path!r} does not reference a valid exception.")
        return found


def _imported(path: str) -> Any:
    """Return the object at a dotted path from the modules already imported, or None."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest module prefix wins
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        found: Any = module
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return found
    return None


@lru_cache(maxsize=256)  # one class per path, so `is` comparisons hold; bounded
def _stand_in(path: str) -> type[UnresolvedException]:
    module, _, name = path.rpartition(".")
    attrs = {"__module__": module or "builtins", "__qualname__": name or path, "path": path}
    return type(name or path, (UnresolvedException,), attrs)


# ----- dtq records as django results -------------------------------------------------------


def exception_path(name: str) -> str:
    """Return the importable path of an error class name from a task's history."""
    module, _, cls = name.rpartition(".")
    if module == "dtq" and isinstance(getattr(errors, cls, None), type):
        return f"dtq.engine.errors.{cls}"  # the engine records dtq errors as dtq.<Class>
    return name


def _task_error(name: str, message: str = "", text: str | None = None) -> TaskError:
    path = exception_path(name)
    return DtqTaskError(exception_class_path=path, traceback=text or f"{path}: {message}\n")


def _final_error(record: dict[str, Any], state: TaskState, history: list[Any]) -> Any:
    """Return the error of a failure that no attempt recorded (expiry, cancel, operator)."""
    raw_error = record.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    last = history[-1] if history else {}
    if state == TaskState.EXPIRED:
        return _task_error("dtq.TaskExpired", "the task's TTL passed before it could start")
    if state == TaskState.CANCELLED and last.get("outcome") != "cancelled":
        reason = record.get("cancel_reason") or error.get("message") or "cancelled"
        return _task_error("dtq.TaskCancelled", reason)
    if STATUS_OF[state] == FAILED and not last.get("error") and state != TaskState.CANCELLED:
        return _task_error(error.get("class") or "dtq.PermanentError", error.get("message", ""))
    return None


def _errors(record: dict[str, Any], state: TaskState, history: list[Any]) -> list[TaskError]:
    found = [
        _task_error(h["error"], h.get("message", ""), h.get("traceback"))
        for h in history
        if h.get("error")
    ]
    final = _final_error(record, state, history)
    return [*found, final] if final else found


def _moment(seconds: float | None) -> datetime | None:
    if not seconds:
        return None
    if settings.USE_TZ:
        return datetime.fromtimestamp(seconds, tz=UTC)
    return datetime.fromtimestamp(seconds)


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not isinstance(payload, dict):
        return [], {}  # undecodable: the worker fails such a task, the result still shows
    return list(payload.get("args") or []), dict(payload.get("kwargs") or {})


def moment_ms(ms: int) -> datetime | None:
    """Return a Redis time in milliseconds as the datetime a record read gives for it."""
    return _moment(ms / 1000)


def _run_after(record: dict[str, Any]) -> datetime | None:
    """Return when the task was last due to run, if it had to wait (None: it ran at once)."""
    due, created = record.get("run_after"), record.get("created_at")
    return _moment(due) if due and created and due > created else None


def recorded_task(task: Task, record: dict[str, Any]) -> Task:
    """Return the task with the priority, queue and run_after its record holds."""
    changes = {
        "priority": record.get("priority", task.priority),
        "queue_name": record.get("queue", task.queue_name),
        "run_after": _run_after(record),
    }
    if all(getattr(task, name) == value for name, value in changes.items()):
        return task
    try:
        return replace(task, **changes)
    except InvalidTask:
        return task  # e.g. QUEUES changed since: the stored result still reads


def result_from_record(task: Task, record: dict[str, Any], alias: str) -> DtqTaskResult:
    """Map a dtq task record (read_side.get_task) onto a django TaskResult."""
    task = recorded_task(task, record)
    state = TaskState(record["state"])
    history = [h for h in record.get("history") or [] if isinstance(h, dict)]
    workers = [h.get("worker") or "" for h in history]
    if state == TaskState.RUNNING and record.get("worker"):
        workers.append(record["worker"])  # the attempt in progress has no history entry yet
    args, kwargs = _arguments(record.get("payload"))
    result = DtqTaskResult(
        task=task,
        id=record["id"],
        status=STATUS_OF[state],
        enqueued_at=_moment(record.get("created_at")),
        started_at=_moment(record.get("started_at")),
        last_attempted_at=_moment(record.get("started_at")),
        finished_at=_moment(record.get("finished_at")) if state.is_terminal else None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=_errors(record, state, history),
        worker_ids=workers,
        state=state,
        attempt=int(record.get("attempt") or 0),
        max_attempts=int(record.get("max_attempts") or 0),
    )
    if state == TaskState.SUCCEEDED:
        object.__setattr__(result, "_return_value", record.get("result"))
    return result


def _finished(result: DtqTaskResult, outcome: Any, state: TaskState) -> DtqTaskResult:
    """Return the result an attempt's outcome left behind in `state` (for task_finished)."""
    entry = codec.loads(outcome.history)
    found = []
    if entry.get("error"):
        found.append(_task_error(entry["error"], entry.get("message", ""), entry.get("traceback")))
    done = replace(
        result,
        status=STATUS_OF[state],
        state=state,
        finished_at=timezone.now(),
        errors=[*result.errors, *found],
    )
    if state == TaskState.SUCCEEDED:
        object.__setattr__(done, "_return_value", codec.loads(outcome.data))
    return done


# ----- the worker's view of a django task ---------------------------------------------------


class DjangoTaskEntry:
    """A DtqBackend's task as the worker registry sees it, with hooks that send its signals."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.name = task.module_path
        self.func = task.func
        self.takes_context = task.takes_context
        self._running: dict[tuple[str, int], DtqTaskResult] = {}

    @property
    def is_async(self) -> bool:
        """Return True when the function is a coroutine function."""
        return iscoroutinefunction(self.func)

    @staticmethod
    def encode_result(value: Any) -> str:
        """Encode a return value by django.tasks' rules (the executor reports what fails)."""
        return codec.dumps(to_json(value))

    def submission(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Build the engine submission of one run (a periodic firing submits through this)."""
        from dtq.backends import submission

        return submission(self.task, args, kwargs)

    def should_retry(self, exc: BaseException) -> bool:
        """Return True when exc is one this task retries on (DtqTask.retry_on)."""
        retry_on = getattr(self.task, "retry_on", (Exception,))
        return not isinstance(exc, PermanentError) and isinstance(exc, retry_on)

    def _sender(self) -> type:
        return type(self.task.get_backend())

    def started(self, att: Any, worker_id: str, context: Any) -> Any:
        """Send task_started; return the django TaskContext a takes_context task gets."""
        try:
            record = read_side.get_task(att.id)  # history: earlier errors and workers
        except RedisError as exc:
            log.warning("task_id=%s: record not read for task_started: %s", att.id, exc)
            record = None
        record = record or _attempt_record(att)
        record.update(state=TaskState.RUNNING, attempt=att.attempt, worker=worker_id)
        result = result_from_record(self.task, record, self.task.backend)
        self._running[(att.id, att.attempt)] = result
        self._send(task_started, result)
        if not self.takes_context:
            return context
        return DtqTaskContext(
            task_result=result,
            cancel=att.cancel,
            scheduled_at=slot_of(att.idem),
            _dtq_context=context,
        )

    def finished(self, att: Any, worker_id: str, outcome: Any, state: str) -> None:
        """Send task_finished when finalize.lua ended the task (state: what it decided).

        Nothing for a retry (RETRYING) or an outcome the fence rejected ('': the attempt that
        replaced this one reports instead); a retry finalize turned into a cancel is sent.
        """
        result = self._running.pop((att.id, att.attempt), None)
        if result is None or not state or not TaskState(state).is_terminal:
            return
        done = _finished(result, outcome, TaskState(state))
        if outcome.exc is None:
            self._send(task_finished, done)
            return
        try:
            raise outcome.exc
        except BaseException:
            # Sent inside the handler, like django's backends: receivers see sys.exc_info().
            self._send(task_finished, done)

    def _send(self, signal: Any, result: DtqTaskResult) -> None:
        """Send a signal to every receiver; one that raises is logged, never fails the task."""
        for receiver, error in signal.send_robust(self._sender(), task_result=result):
            if isinstance(error, Exception):
                log.error("task_id=%s: receiver %r failed", result.id, receiver, exc_info=error)


def _attempt_record(att: Any) -> dict[str, Any]:
    """Return a record-shaped dict from what the claim returned (if the record read failed)."""
    try:
        payload = codec.loads(att.payload)
    except ValueError:
        payload = None
    return {
        "id": att.id,
        "queue": att.queue,
        "payload": payload,
        "created_at": ids.created_ms(att.id) / 1000,
        "started_at": att.started_at,
        "max_attempts": att.max_attempts,
        "history": [],
    }
