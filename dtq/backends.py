"""django.tasks backends: DtqBackend (Redis and dtq workers), and two for tests.

``TASKS = {"default": {"BACKEND": "dtq.backends.DtqBackend"}}`` makes standard
``@django.tasks.task`` code run on dtq; docs/django-tasks.md has the details.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.checks import Error
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone
from django.utils.crypto import get_random_string

from dtq.compat import (
    BaseTaskBackend,
    DummyBackend,
    ImmediateBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from dtq.djjson import to_json
from dtq.djtasks import (
    READY,
    DjangoTaskEntry,
    DtqTask,
    DtqTaskContext,
    DtqTaskError,
    DtqTaskResult,
    UnresolvedException,
    moment_ms,
    recorded_task,
    result_from_record,
)
from dtq.engine import read_side, registry
from dtq.engine.errors import BulkSubmitError, DtqError, InvalidTaskError, SubmitError
from dtq.engine.keys import QUEUE_NAME
from dtq.engine.limits import TaskLimits
from dtq.engine.state import TaskState
from dtq.engine.submit import (
    MAX_NAME_LENGTH,
    Accepted,
    Submission,
    asubmit,
    asubmit_many,
    prepare,
    prepare_many,
    submit,
    submit_many,
    with_task_id,
)
from dtq.options import TaskOptions

__all__ = [
    "DtqBackend",
    "DtqDummyBackend",
    "DtqImmediateBackend",
    "DtqTask",
    "DtqTaskContext",
    "DtqTaskError",
    "DtqTaskResult",
    "UnresolvedException",
    "aenqueue_many",
    "enqueue_many",
    "result_from_record",
]

log = logging.getLogger("dtq.backends")
Call = tuple[Sequence[Any], Mapping[str, Any]]  # (args, kwargs) of one run, for enqueue_many
OPTIONS = {"ENQUEUE_ON_COMMIT": False, "DATABASE": DEFAULT_DB_ALIAS}


# ----- submissions -------------------------------------------------------------------------


def submission(task: Task, args: Any, kwargs: Any, task_id: str | None = None) -> Submission:
    """Build the engine submission for one enqueue of a django task."""
    options = TaskOptions.of(task)  # checked already by validate_task: this only reads them
    return Submission.of(
        task.module_path,
        options,
        to_json(list(args)),
        to_json(dict(kwargs)),
        task_id,
        limits=_limits_field(options.limits(), task, args, kwargs),
    )


def _limits_field(limits: TaskLimits | None, task: Task, args: Any, kwargs: Any) -> str:
    if limits is None:
        return ""
    call_args = (None, *args) if task.takes_context else tuple(args)
    return limits.encoded(task.func, call_args, dict(kwargs))


# ----- validation and options ---------------------------------------------------------------


def _check_options(task: Task) -> None:
    """Raise InvalidTask when a task's options are out of range (dtq.options' messages)."""
    try:
        TaskOptions.of(task)
    except InvalidTaskError as exc:  # InvalidOption is one
        raise InvalidTask(str(exc)) from None
    database = getattr(task, "database", None)
    if database is not None and database not in settings.DATABASES:
        raise InvalidTask(f"database {database!r} is not in settings.DATABASES")


def _option_errors(backend: BaseTaskBackend) -> list[Error]:
    """Return the system-check errors of a dtq backend's OPTIONS and QUEUES."""
    where = f"TASKS[{backend.alias!r}]"
    found = []
    options = backend.options if isinstance(backend.options, dict) else {}
    for name in sorted(set(options) - set(OPTIONS)):
        hint = f"Known options: {', '.join(sorted(OPTIONS))}."
        found.append(Error(f"{where}: unknown OPTIONS key {name!r}", hint=hint, id="dtq.E101"))
    if not isinstance(options.get("ENQUEUE_ON_COMMIT", False), bool):
        found.append(Error(f"{where}: OPTIONS['ENQUEUE_ON_COMMIT'] must be a bool", id="dtq.E102"))
    if options.get("DATABASE", DEFAULT_DB_ALIAS) not in settings.DATABASES:
        found.append(
            Error(f"{where}: OPTIONS['DATABASE'] is not in settings.DATABASES", id="dtq.E103")
        )
    for queue in sorted(q for q in backend.queues if not QUEUE_NAME.fullmatch(str(q))):
        hint = "Use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit."
        found.append(Error(f"{where}: invalid queue name {queue!r}", hint=hint, id="dtq.E104"))
    return found


class _DtqOptions(BaseTaskBackend):
    """What every dtq backend shares: DtqTask, dtq's validation, OPTIONS, on-commit enqueue."""

    task_class = DtqTask
    supports_defer = True
    supports_async_task = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        """Apply dtq's rules (dtq.options: the same as for @dtq.task), then django's."""
        _check_options(task)  # first: one bad value gets dtq's message, whatever the entry
        super().validate_task(task)
        if len(task.module_path) > MAX_NAME_LENGTH:
            raise InvalidTask(f"task path is longer than {MAX_NAME_LENGTH} characters")

    def check(self, **kwargs: Any) -> list[Any]:
        """Report unknown or invalid OPTIONS and invalid QUEUES."""
        return [*super().check(**kwargs), *_option_errors(self)]

    @property
    def on_commit_default(self) -> bool:
        """Return True when enqueue() waits for the transaction to commit (OPTIONS)."""
        return bool(self.options.get("ENQUEUE_ON_COMMIT", False))

    def on_commit(self, task: Task, action: Any) -> None:
        """Run action when the transaction of the task's database commits (now if none)."""
        alias = getattr(task, "database", None) or self.options.get("DATABASE", DEFAULT_DB_ALIAS)
        transaction.on_commit(action, using=alias)

    def _ready(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        return TaskResult(
            task=task,
            id=get_random_string(32),
            status=READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )


# ----- the backends -------------------------------------------------------------------------


class DtqBackend(_DtqOptions):
    """Runs django.tasks on dtq: Redis, dtq workers, at-least-once delivery."""

    supports_get_result = True

    def validate_task(self, task: Task) -> None:
        """Validate, then register the task so dtq workers can find it (no I/O)."""
        super().validate_task(task)
        current = registry.get(task.module_path)
        if getattr(current, "func", None) is task.func:
            return  # using() copies share the entry of the task they came from
        try:
            registry.register(DjangoTaskEntry(task))
        except InvalidTaskError as exc:
            raise InvalidTask(str(exc)) from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> DtqTaskResult:
        """Submit one run of the task (at commit when OPTIONS['ENQUEUE_ON_COMMIT'])."""
        self.validate_task(task)
        if self.on_commit_default:
            return self.enqueue_on_commit(task, args, kwargs)
        sub = submission(task, args, kwargs)
        accepted = submit(sub)
        if accepted.duplicate:
            return self._duplicate(self.get_result(accepted.id))
        result = self._accepted(task, sub, accepted)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> DtqTaskResult:
        """Submit one run of the task from async code, without blocking the event loop."""
        self.validate_task(task)
        if self.on_commit_default:  # transactions belong to the sync world
            enqueue = sync_to_async(self.enqueue_on_commit, thread_sensitive=True)
            return await enqueue(task, args, kwargs)
        sub = submission(task, args, kwargs)
        accepted = await asubmit(sub)
        if accepted.duplicate:
            return self._duplicate(await self.aget_result(accepted.id))
        result = self._accepted(task, sub, accepted)
        await task_enqueued.asend(type(self), task_result=result)
        return result

    def enqueue_many(self, task: Task, calls: Iterable[Call]) -> list[DtqTaskResult]:
        """Submit one run per (args, kwargs) pair, pipelined (at commit with ENQUEUE_ON_COMMIT).

        Every item is validated before anything is written; BulkSubmitError names the
        refused items (dtq.errors), and holds the results of the accepted ones.
        """
        self.validate_task(task)
        if self.on_commit_default:
            return self._enqueue_many_on_commit(task, calls)
        subs = _submissions(task, calls)
        results = self._bulk_results(task, subs, submit_many(subs))
        for result in results:
            task_enqueued.send(type(self), task_result=result)
        return results

    async def aenqueue_many(self, task: Task, calls: Iterable[Call]) -> list[DtqTaskResult]:
        """Submit one run per (args, kwargs) pair from async code."""
        self.validate_task(task)
        if self.on_commit_default:
            enqueue = sync_to_async(self._enqueue_many_on_commit, thread_sensitive=True)
            return await enqueue(task, calls)
        subs = _submissions(task, calls)
        results = self._bulk_results(task, subs, await asubmit_many(subs))
        for result in results:
            await task_enqueued.asend(type(self), task_result=result)
        return results

    def _enqueue_many_on_commit(self, task: Task, calls: Iterable[Call]) -> list[DtqTaskResult]:
        subs = _submissions(task, calls, new_ids=True)
        prepare_many(subs)  # a bad argument fails here, not at commit
        results = [
            self._accepted(task, sub, Accepted(str(sub.task_id), _first_state(sub)), False)
            for sub in subs
        ]
        self.on_commit(task, partial(self._submit_many_committed, results, subs))
        return results

    def _submit_many_committed(self, results: list[DtqTaskResult], subs: list[Submission]) -> None:
        for result, outcome in zip(results, submit_many(subs), strict=True):
            if isinstance(outcome, SubmitError):
                log.error(
                    "task_id=%s: not enqueued after its transaction committed: %s",
                    result.id,
                    outcome,
                )
                continue
            object.__setattr__(result, "enqueued_at", timezone.now())
            task_enqueued.send(type(self), task_result=result)

    def _bulk_results(
        self, task: Task, subs: list[Submission], outcomes: list[Accepted | SubmitError]
    ) -> list[DtqTaskResult]:
        results: list[Any] = []
        errors: dict[int, DtqError] = {}
        for i, (sub, outcome) in enumerate(zip(subs, outcomes, strict=True)):
            if isinstance(outcome, SubmitError):
                errors[i] = outcome
                results.append(None)
            else:
                results.append(self._accepted(task, sub, outcome))
        if errors:
            raise BulkSubmitError(errors, results, submitted=True)
        return results

    def enqueue_on_commit(self, task: Task, args: Any, kwargs: Any) -> DtqTaskResult:
        """Return a READY result now; submit it when the transaction commits, never on rollback.

        The id is chosen now, so the result can be kept; reading it fails until the commit.
        """
        self.validate_task(task)
        sub = with_task_id(submission(task, args, kwargs))
        prepare(sub)  # validate and encode now: a bad argument fails here, not at commit
        result = self._accepted(task, sub, Accepted(str(sub.task_id), _first_state(sub)), False)
        self.on_commit(task, partial(self._submit_committed, result, sub))
        return result

    def _submit_committed(self, result: DtqTaskResult, sub: Submission) -> None:
        try:
            accepted = submit(sub)
        except Exception:
            log.exception("task_id=%s: not enqueued after its transaction committed", sub.task_id)
            raise
        if accepted.duplicate:
            log.info(
                "task_id=%s not enqueued: its idempotency key is task %s", sub.task_id, accepted.id
            )
            return
        accepted_now = self._accepted(result.task, sub, accepted)
        for name in ("task", "enqueued_at"):
            object.__setattr__(result, name, getattr(accepted_now, name))
        task_enqueued.send(type(self), task_result=result)

    def _accepted(
        self, task: Task, sub: Submission, accepted: Accepted, enqueued: bool = True
    ) -> DtqTaskResult:
        """Return the result of an accepted submission as get_result() reads it back.

        Times are Redis' (the clock and millisecond precision of the record), not this host's.
        """
        enqueued_at = None
        if enqueued:
            created, delay = accepted.created_ms, int(sub.delay * 1000)  # as submit.lua adds
            recorded = {"created_at": created / 1000, "run_after": (created + delay) / 1000}
            task, enqueued_at = recorded_task(task, recorded), moment_ms(created)
        return DtqTaskResult(
            task=task,
            id=accepted.id,
            status=READY,
            enqueued_at=enqueued_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(sub.args),
            kwargs=dict(sub.kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
            state=TaskState(accepted.state or TaskState.QUEUED),
            max_attempts=sub.max_attempts,
        )

    @staticmethod
    def _duplicate(result: DtqTaskResult) -> DtqTaskResult:
        object.__setattr__(result, "duplicate", True)
        return result

    def get_result(self, result_id: str) -> DtqTaskResult:
        """Read a task's result from Redis, from any process."""
        record = read_side.get_task(result_id) if isinstance(result_id, str) else None
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        entry = registry.get(record.get("name") or "")
        task = getattr(entry, "task", None)
        if task is None:  # a dtq.task, or a module this process did not import
            raise TaskResultDoesNotExist(f"{result_id} is not a django task known here")
        return result_from_record(task, record, self.alias)

    async def aget_result(self, result_id: str) -> DtqTaskResult:
        """Read a task's result from Redis, from async code."""
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)


def enqueue_many(task: Task, calls: Iterable[Call]) -> list[TaskResult]:
    """Enqueue one run of a django task per (args, kwargs) pair on the task's backend.

    On DtqBackend it is one pipelined batch (DtqBackend.enqueue_many); on any other backend
    each call is an ordinary enqueue().
    """
    backend = task.get_backend()
    if isinstance(backend, DtqBackend):
        return list(backend.enqueue_many(task, calls))
    return [task.enqueue(*args, **kwargs) for args, kwargs in calls]


async def aenqueue_many(task: Task, calls: Iterable[Call]) -> list[TaskResult]:
    """Enqueue one run of a django task per (args, kwargs) pair from async code."""
    backend = task.get_backend()
    if isinstance(backend, DtqBackend):
        return list(await backend.aenqueue_many(task, calls))
    return [await task.aenqueue(*args, **kwargs) for args, kwargs in calls]


def _submissions(task: Task, calls: Iterable[Call], new_ids: bool = False) -> list[Submission]:
    """Build the submissions of a bulk enqueue, checking each item's shape."""
    if getattr(task, "idempotency_key", None) is not None:
        raise InvalidTask("an idempotency key names one submission: use enqueue()")
    options = TaskOptions.of(task)  # checked already by validate_task: this only reads them
    template, limits = Submission.of(task.module_path, options, (), {}), options.limits()
    subs = []
    for i, call in enumerate(calls):
        if not (isinstance(call, tuple | list) and len(call) == 2):
            raise InvalidTask(f"item {i}: expected an (args, kwargs) pair, got {call!r}")
        args, kwargs = call
        if not isinstance(args, tuple | list) or not isinstance(kwargs, Mapping):
            raise InvalidTask(
                f"item {i}: expected (a tuple or list of arguments, a dict of keyword "
                f"arguments), got ({type(args).__name__}, {type(kwargs).__name__})"
            )
        field = _limits_field(limits, task, args, kwargs)
        sub = template.called(to_json(list(args)), to_json(dict(kwargs)), field)
        subs.append(with_task_id(sub) if new_ids else sub)
    return subs


def _first_state(sub: Submission) -> TaskState:
    return TaskState.PENDING if sub.delay else TaskState.QUEUED


class DtqImmediateBackend(_DtqOptions, ImmediateBackend):  # type: ignore[misc]
    """Django's ImmediateBackend accepting dtq's task options (for tests; run_after ignored)."""

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Run the task now (at commit when OPTIONS['ENQUEUE_ON_COMMIT'])."""
        if self.on_commit_default:
            return self.enqueue_on_commit(task, args, kwargs)
        return ImmediateBackend.enqueue(self, task, args, kwargs)

    def enqueue_on_commit(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Return a READY result now and run the task when the transaction commits."""
        self.validate_task(task)
        result = self._ready(task, args, kwargs)
        self.on_commit(task, partial(self._execute_task, result))  # type: ignore[attr-defined]
        return result


class DtqDummyBackend(_DtqOptions, DummyBackend):  # type: ignore[misc]
    """Django's DummyBackend accepting dtq's task options (stores results, runs nothing)."""

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store the result (at commit when OPTIONS['ENQUEUE_ON_COMMIT'])."""
        if self.on_commit_default:
            return self.enqueue_on_commit(task, args, kwargs)
        return DummyBackend.enqueue(self, task, args, kwargs)  # type: ignore[no-any-return]

    def enqueue_on_commit(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Return a READY result now and store it when the transaction commits."""
        self.validate_task(task)
        result = self._ready(task, args, kwargs)
        self.on_commit(task, partial(self._store, result))
        return result

    def _store(self, result: TaskResult) -> None:
        # DummyBackend._store_result of Django 6.x; the 5.2 backport has no such method.
        object.__setattr__(result, "enqueued_at", timezone.now())
        self.results.append(result)
        task_enqueued.send(type(self), task_result=result)
