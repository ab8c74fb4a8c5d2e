"""Run one attempt's handler and turn what happened into a finalize outcome."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dtq import propagation, tracing
from dtq.engine import codec, registry
from dtq.engine.errors import PermanentError, RetryableError, TaskCancelled, TaskTimeout
from dtq.engine.retry import RetryPolicy

MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000
log = logging.getLogger("dtq.worker")


@dataclass(slots=True, eq=False)
class Attempt:
    """One claimed attempt of a task, held by this worker until finalized."""

    id: str
    entry: str
    queue_index: int
    band: int
    name: str
    payload: str
    attempt: int
    max_attempts: int
    timeout: float | None
    retry: str
    idem: str
    queue: str = ""
    started_at: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)
    lost: bool = False  # the lease was taken away: the outcome will be fenced out anyway
    done: bool = False  # the handler finished; only finalize is left
    handle: asyncio.Task[Any] | None = None


@dataclass(slots=True)
class Outcome:
    """What finalize.lua records for an attempt."""

    kind: str  # success | retry | fail | cancel
    data: str  # result JSON on success, else error JSON {class, message}
    history: str  # attempt history entry JSON
    delay_ms: int = 0
    exc: BaseException | None = field(default=None, repr=False)  # for hooks; never stored


def _error_name(exc: BaseException) -> str:
    cls = type(exc)
    module = "dtq" if cls.__module__.startswith("dtq.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


def _record(att: Attempt, worker_id: str, kind: str, exc: BaseException | None) -> str:
    entry: dict[str, Any] = {
        "attempt": att.attempt,
        "worker": worker_id,
        "started_at": att.started_at,
        "ended_at": time.time(),
        "outcome": kind,
    }
    if exc is not None:
        entry["error"] = _error_name(exc)
        entry["message"] = codec.truncate(str(exc), MAX_MESSAGE)
        text = "".join(traceback.format_exception(exc))
        entry["traceback"] = codec.truncate(text, MAX_TRACEBACK)
    return codec.dumps(entry)


def failure(att: Attempt, worker_id: str, exc: BaseException, retryable: bool) -> Outcome:
    """Classify a failed attempt: retry while attempts and policy allow, else fail."""
    error = codec.dumps(
        {"class": _error_name(exc), "message": codec.truncate(str(exc), MAX_MESSAGE)}
    )
    if isinstance(exc, TaskCancelled):
        return Outcome("cancel", error, _record(att, worker_id, "cancelled", exc), exc=exc)
    if retryable and att.attempt < att.max_attempts:
        delay = getattr(exc, "delay", None)
        if delay is None:
            delay = RetryPolicy.from_dict(codec.loads(att.retry) or None).delay(att.attempt)
        retry = _record(att, worker_id, "retry", exc)
        return Outcome("retry", error, retry, int(delay * 1000), exc=exc)
    return Outcome("fail", error, _record(att, worker_id, "failed", exc), exc=exc)


def success(att: Attempt, worker_id: str, value: Any) -> Outcome:
    """Encode a return value; one that cannot be encoded fails the task, as its real error.

    A registry entry may bring its own encode_result (django tasks follow Django's rules).
    Retrying cannot help: the same code returns the same value.
    """
    encode = getattr(registry.get(att.name), "encode_result", codec.dumps)
    try:
        data = encode(value)
    except (TypeError, ValueError) as exc:
        return failure(att, worker_id, exc, retryable=False)
    return Outcome("success", data, _record(att, worker_id, "succeeded", None))


def prepare_call(att: Attempt, context: Any) -> tuple[Any, list[Any], dict[str, Any]]:
    """Find the handler and decode its arguments; raise PermanentError when impossible."""
    task = registry.get(att.name)
    if task is None:
        raise PermanentError(f"unknown task {att.name!r}: not in this worker's registry")
    try:
        payload = codec.loads(att.payload)
        args, kwargs = list(payload["args"]), dict(payload["kwargs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise PermanentError(f"undecodable payload: {exc}") from None
    if task.takes_context:
        args.insert(0, context)
    carried = payload.get("ctx")
    traced = tracing.active()
    if carried or traced:
        inner = partial(tracing.consuming, att) if traced else None
        task = _Carried(task, propagation.bind(task.func, carried or {}, task.is_async, inner))
    return task, args, kwargs


class _Carried:
    """A registry entry whose handler runs inside the context the task carried."""

    def __init__(self, entry: Any, func: Any) -> None:
        self.entry, self.func = entry, func

    def __getattr__(self, name: str) -> Any:
        return getattr(self.entry, name)


def _run_sync(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    from django.db import close_old_connections

    close_old_connections()  # never start a task on a connection the database dropped
    try:
        return func(*args, **kwargs)
    finally:
        close_old_connections()


async def _call(
    task: Any, args: list[Any], kwargs: dict[str, Any], att: Attempt, pool: Any, on_stuck: Any
) -> Any:
    """Await an async handler on the loop, or run a sync one on the pool, within its timeout."""
    if task.is_async:
        if att.timeout is None:
            return await task.func(*args, **kwargs)
        return await asyncio.wait_for(task.func(*args, **kwargs), att.timeout)
    future = asyncio.get_running_loop().run_in_executor(pool, _run_sync, task.func, args, kwargs)
    if att.timeout is None:
        return await future
    try:
        return await asyncio.wait_for(asyncio.shield(future), att.timeout)
    except TimeoutError:
        on_stuck(att, future)  # the thread cannot be killed; it keeps its slot
        raise


async def execute(
    att: Attempt, worker_id: str, context: Any, pool: ThreadPoolExecutor, on_stuck: Any
) -> Outcome:
    """Run one attempt, with its registry entry's hooks around it if it has them.

    An entry may define started(att, worker_id, context) -> the context its handler takes, and
    finished(att, worker_id, outcome); dtq.backends uses them for django.tasks' signals. They
    run on the pool, not on the loop, so their receivers may use the ORM.
    """
    entry = registry.get(att.name)
    if entry is None or not hasattr(entry, "started"):
        return tracing.finish(att, await _execute(att, worker_id, context, pool, on_stuck))
    loop = asyncio.get_running_loop()
    try:
        context = await loop.run_in_executor(
            pool, _hook, entry.started, context, att, worker_id, context
        )
        outcome = await _execute(att, worker_id, context, pool, on_stuck)
    except asyncio.CancelledError:
        if not att.cancel.is_set():
            raise  # worker shutdown
        outcome = failure(att, worker_id, TaskCancelled("cancelled on request"), False)
    try:
        await loop.run_in_executor(pool, _hook, entry.finished, None, att, worker_id, outcome)
    except asyncio.CancelledError:
        if not att.cancel.is_set():
            raise  # a cancel request that comes now must not lose a known outcome
    return tracing.finish(att, outcome)


def _hook(method: Any, default: Any, att: Attempt, *args: Any) -> Any:
    """Call a registry entry's hook; a failing hook is logged and never fails the attempt."""
    try:
        return method(att, *args)
    except Exception:
        log.exception("task_id=%s: %s hook failed", att.id, getattr(method, "__name__", "?"))
        return default


async def _execute(
    att: Attempt, worker_id: str, context: Any, pool: ThreadPoolExecutor, on_stuck: Any
) -> Outcome:
    """Run the handler of one attempt and return its outcome (never raises)."""
    try:
        task, args, kwargs = prepare_call(att, context)
    except PermanentError as exc:
        return failure(att, worker_id, exc, retryable=False)
    try:
        value = await _call(task, args, kwargs, att, pool, on_stuck)
    except TimeoutError:
        timeout = TaskTimeout(f"handler ran past its timeout of {att.timeout}s")
        return failure(att, worker_id, timeout, retryable=True)
    except asyncio.CancelledError:
        if att.cancel.is_set():
            return failure(att, worker_id, TaskCancelled("cancelled on request"), False)
        raise  # worker shutdown: leave the attempt unfinalized for the reaper
    except Exception as exc:
        return classify(att, worker_id, task, exc)
    return success(att, worker_id, value)


def classify(att: Attempt, worker_id: str, task: Any, exc: Exception) -> Outcome:
    """Turn an exception a handler raised into a retry, a failure or a cancel."""
    if isinstance(exc, (PermanentError, TaskCancelled)):
        return failure(att, worker_id, exc, retryable=False)
    if isinstance(exc, RetryableError):
        return failure(att, worker_id, exc, retryable=True)
    return failure(att, worker_id, exc, retryable=task.should_retry(exc))


def is_plain_sync(att: Attempt) -> bool:
    """Return True for a sync handler with no timeout and no hooks (the worker's fast path)."""
    entry = registry.get(att.name)
    return (
        entry is not None
        and att.timeout is None
        and not entry.is_async
        and not hasattr(entry, "started")
    )


def run_sync_attempt(att: Attempt, worker_id: str, context: Any, run: Any = None) -> Outcome:
    """Run a plain sync handler on the calling pool thread and return its outcome.

    run replaces _run_sync (dtq.testing runs handlers on the test's own connection).
    """
    try:
        task, args, kwargs = prepare_call(att, context)
    except PermanentError as exc:
        return failure(att, worker_id, exc, retryable=False)
    try:
        value = (run or _run_sync)(task.func, args, kwargs)
    except Exception as exc:
        return tracing.finish(att, classify(att, worker_id, task, exc))
    return tracing.finish(att, success(att, worker_id, value))
