"""The @dtq.task decorator and the Task object it returns (named like django.tasks)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import registry
from dtq.engine.declared import task_queues
from dtq.engine.errors import (
    BulkSubmitError,
    DtqError,
    InvalidTaskError,
    PermanentError,
    SubmitError,
    UnknownQueue,
)
from dtq.engine.limits import TaskLimits
from dtq.engine.progress import Reporter, check
from dtq.engine.submit import Accepted, Submission, asubmit, asubmit_many, submit, submit_many
from dtq.options import USING_OPTIONS, DeliveryOptions, TaskOptions, check_priority, check_queue
from dtq.result import TaskResult

_UNSET: Any = object()
Call = tuple[Sequence[Any], Mapping[str, Any]]  # (args, kwargs) of one run, for enqueue_many


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    """What a handler with takes_context=True receives as its first argument."""

    task_id: str
    attempt: int
    max_attempts: int
    queue_name: str
    worker_id: str
    deadline: float | None  # epoch seconds when the timeout fires, if there is one
    _cancel: Any = field(repr=False)
    idempotency_key: str = ""
    _reporter: Any = field(default=None, repr=False, compare=False)  # made on first use

    @property
    def scheduled_at(self) -> datetime | None:
        """Return the slot a periodic firing fires for (aware, UTC); None for other tasks."""
        from dtq.engine.firing import slot_of

        return slot_of(self.idempotency_key)

    @property
    def cancel_requested(self) -> bool:
        """Return True once a cancel was requested, or the lease was lost (stop: no outcome)."""
        return self._cancel.is_set()

    def progress(self, fraction: float, message: str = "") -> None:
        """Report how far this attempt got (0..1) on the task record, at a bounded rate."""
        if self._reporter is None:
            # Made here, not per attempt: tasks that never report cost nothing.
            reporter = Reporter(self.task_id, self.queue_name, self.attempt)
            object.__setattr__(self, "_reporter", reporter)
        self._reporter.report(fraction, message)

    async def aprogress(self, fraction: float, message: str = "") -> None:
        """Report progress from async code (the write runs off the event loop)."""
        check(fraction, message)  # a bad value raises here, in the caller's task
        await asyncio.to_thread(self.progress, fraction, message)


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(DeliveryOptions):
    """A registered handler plus the defaults its submissions use (dtq.options checks them)."""

    func: Callable[..., Any]
    name: str
    queue_name: str | None = None
    priority: int = 0
    takes_context: bool = False
    run_after: datetime | timedelta | None = None
    # Other queues this task accepts besides its own (None: any declared queue from code,
    # only its own through the API), and the highest priority an API submitter may ask for.
    queues: tuple[str, ...] | None = None
    max_priority: int | None = None
    # The checked options every submission starts from (made again by using()).
    options: TaskOptions = field(init=False, repr=False, compare=False)
    # Whether the handler is a coroutine function: asked per attempt, so found once.
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Raises InvalidOption (an InvalidTaskError) for a bad option.
        object.__setattr__(self, "options", TaskOptions.of(self))
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.func))
        for queue in self.queues or ():
            check_queue(queue)
        if self.max_priority is not None:
            check_priority(self.max_priority, "max_priority")
            if self.max_priority < self.priority:
                raise InvalidTaskError(
                    f"max_priority ({self.max_priority}) is below priority ({self.priority})"
                )
        if self.takes_context and not _accepts_positional(self.func):
            raise InvalidTaskError(f"{self.name}: takes_context=True needs a first parameter")

    @property
    def limits(self) -> TaskLimits | None:
        """Return the task's flow-control limits (None: it has none)."""
        return self.options.limits()  # checked already when the options were made

    def using(self, **changes: Any) -> Task:
        """Return a copy with other submission defaults (priority, queue_name, run_after...)."""
        unknown = set(changes) - USING_OPTIONS
        if unknown:
            raise TypeError(f"using() got unexpected option(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    def accepted_queues(self) -> list[str]:
        """Return the queues this task accepts: the one it was defined with, then `queues`."""
        defined = registry.get(self.name)  # using() copies carry another queue_name
        return task_queues(defined if isinstance(defined, Task) else self)

    def submission(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Submission:
        """Build the engine submission for one call with these arguments."""
        self._check_queue()
        limits = self._limits_field(args, kwargs)
        return Submission.of(self.name, self.options, args, kwargs, limits=limits)

    def _check_queue(self) -> None:
        queue = self.queue_name or dtq_settings.DEFAULT_QUEUE
        if self.queues is not None and queue not in (accepted := self.accepted_queues()):
            raise UnknownQueue(queue, accepted, by=f"accepted by task {self.name!r}")

    def _limits_field(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        limits = self.limits
        if limits is None:
            return ""
        # The handler's signature names the key argument; a context parameter comes first.
        call_args = (None, *args) if self.takes_context else args
        return limits.encoded(self.func, call_args, kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Any:
        """Return a signature (dtq.canvas): this task with bound arguments, for a workflow."""
        from dtq.canvas import Signature

        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Any:
        """Return an immutable signature: the previous step's result is not passed to it."""
        from dtq.canvas import Signature

        return Signature(self, args, kwargs, immutable=True)

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskResult:
        """Submit one run of this task and return its result handle at once."""
        return self._result(submit(self.submission(args, kwargs)))

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskResult:
        """Submit one run of this task from async code."""
        return self._result(await asubmit(self.submission(args, kwargs)))

    def enqueue_many(self, calls: Iterable[Call]) -> list[TaskResult]:
        """Submit one run per (args, kwargs) pair, pipelined; results in the same order.

        Every item is validated before anything is written. BulkSubmitError names the items
        refused (invalid: nothing was submitted; a full queue: the others were accepted).
        """
        return self._results(submit_many(self._submissions(calls)))

    async def aenqueue_many(self, calls: Iterable[Call]) -> list[TaskResult]:
        """Submit one run per (args, kwargs) pair from async code."""
        return self._results(await asubmit_many(self._submissions(calls)))

    def _submissions(self, calls: Iterable[Call]) -> list[Submission]:
        if self.idempotency_key is not None:
            raise InvalidTaskError("an idempotency key names one submission: use enqueue()")
        self._check_queue()
        template, subs = Submission.of(self.name, self.options, (), {}), []
        limited = self.limits is not None
        for i, call in enumerate(calls):
            if not (isinstance(call, tuple | list) and len(call) == 2):
                raise InvalidTaskError(f"item {i}: expected an (args, kwargs) pair, got {call!r}")
            args, kwargs = call
            # type() first: isinstance of an ABC costs a bulk task ~0.3 us.
            mapping = type(kwargs) is dict or isinstance(kwargs, Mapping)
            if not isinstance(args, tuple | list) or not mapping:
                raise InvalidTaskError(
                    f"item {i}: expected (a tuple or list of arguments, a dict of keyword "
                    f"arguments), got ({type(args).__name__}, {type(kwargs).__name__})"
                )
            args, kwargs = tuple(args), dict(kwargs)
            limits = self._limits_field(args, kwargs) if limited else ""
            subs.append(template.called(args, kwargs, limits))
        return subs

    def _results(self, outcomes: list[Accepted | SubmitError]) -> list[TaskResult]:
        results: list[Any] = []
        errors: dict[int, DtqError] = {}
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, SubmitError):
                errors[i] = outcome
                results.append(None)
            else:
                results.append(self._result(outcome))
        if errors:
            raise BulkSubmitError(errors, results, submitted=True)
        return results

    def _result(self, accepted: Accepted) -> TaskResult:
        state = accepted.state or "QUEUED"
        return TaskResult(
            id=accepted.id,
            name=self.name,
            queue_name=self.queue_name or dtq_settings.DEFAULT_QUEUE,
            state=state,  # type: ignore[arg-type]
            duplicate=accepted.duplicate,
        )

    def get_result(self, task_id: str) -> TaskResult:
        """Return the current state of a task of this kind by id."""
        result = TaskResult.load(task_id)
        if result.name != self.name:
            raise InvalidTaskError(f"task {task_id} is a {result.name!r}, not {self.name!r}")
        return result

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the handler directly in this process (no queue, no retries)."""
        return self.func(*args, **kwargs)

    def should_retry(self, exc: BaseException) -> bool:
        """Return True when exc is one this task retries on."""
        return not isinstance(exc, PermanentError) and isinstance(exc, self.retry_on)


def _accepts_positional(func: Callable[..., Any]) -> bool:
    params = inspect.signature(func).parameters.values()
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


def task(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    queue_name: str | None = None,
    priority: int = 0,
    takes_context: bool = False,
    max_attempts: int | None = None,
    retry_base: float | None = None,
    retry_cap: float | None = None,
    retry_jitter: float | None = None,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    timeout: float | None = None,
    ttl: float | None = None,
    queues: list[str] | tuple[str, ...] | None = None,
    max_priority: int | None = None,
    rate_limit: str | None = None,
    rate_burst: int | None = None,
    max_concurrency: int | None = None,
    concurrency_key: str | None = None,
) -> Any:
    """Register a function as a dtq task; usable bare (@task) or with options (@task(...))."""

    def wrap(func: Callable[..., Any]) -> Task:
        task_obj = Task(
            func=func,
            name=name or f"{func.__module__}.{func.__qualname__}",
            queue_name=queue_name,
            priority=priority,
            takes_context=takes_context,
            max_attempts=max_attempts,
            retry_base=retry_base,
            retry_cap=retry_cap,
            retry_jitter=retry_jitter,
            retry_on=tuple(retry_on),
            timeout=timeout,
            ttl=ttl,
            queues=tuple(queues) if queues is not None else None,
            max_priority=max_priority,
            rate_limit=rate_limit,
            rate_burst=rate_burst,
            max_concurrency=max_concurrency,
            concurrency_key=concurrency_key,
        )
        registry.register(task_obj)
        return task_obj

    return wrap(function) if function is not None else wrap
