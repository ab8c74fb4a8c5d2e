"""Run one attempt's handler and turn what happened into a finalize outcome."""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dtq import propagation, tracing
from dtq.engine import clock, codec, failpoints, registry
from dtq.engine.errors import PermanentError, RetryableError, TaskCancelled, TaskTimeout
from dtq.engine.retry import RetryPolicy

MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000
# A handler starts only within this share of its lease: the rest is the safety margin for the
# hand-off to the handler, clock rates, and the renewal that must reach Redis before the end.
START_WITHIN = 0.8
log = logging.getLogger("dtq.worker")


def _optional_float(value: Any) -> float | None:
    """Decode a number sent as '' when not set."""
    return float(value) if value not in (None, "") else None


def _ms(value: Any) -> int:
    """Decode a Redis clock reading (ms) sent as '' when the record has none: 0."""
    return int(value) if value not in (None, "") else 0


@dataclass(slots=True, eq=False)
class Attempt:
    """One claimed attempt of a task, held by this worker until finalized."""

    # The fields claim.lua replies with (metadata "claim": the decoder of the value sent): the
    # gateway's CLAIMED reply is declared from these, and claim.lua builds it by the same names.
    id: str = field(metadata={"claim": str})
    entry: str = field(metadata={"claim": str})
    queue_index: int = field(metadata={"claim": int})
    band: int = field(metadata={"claim": int})
    name: str = field(metadata={"claim": str})
    payload: str = field(metadata={"claim": str})
    attempt: int = field(metadata={"claim": int})
    max_attempts: int = field(metadata={"claim": int})
    timeout: float | None = field(metadata={"claim": _optional_float})
    retry: str = field(metadata={"claim": str})
    idem: str = field(metadata={"claim": str})
    # Redis' clock (ms) when this attempt's delivery was queued and when it was claimed: the
    # wait the worker counts in its queue's histogram (dtq.engine.latency).
    queued_ms: int = field(default=0, metadata={"claim": _ms})
    claimed_ms: int = field(default=0, metadata={"claim": _ms})
    queue: str = ""
    workflow: str = ""  # the workflow this task is a member of ('' for none)
    workflow_member: int = 0  # and its index there
    started_at: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)
    # Past this instant on the lease clock (dtq.engine.clock) the handler must not start.
    lease_until: float = math.inf
    lost: bool = False  # the lease was taken away: the outcome will be fenced out anyway
    began: bool = False  # the handler was called
    done: bool = False  # the handler finished; only finalize is left
    handle: asyncio.Task[Any] | None = None


@dataclass(slots=True)
class Outcome:
    """What finalize.lua records for an attempt."""

    kind: str  # success | retry | fail | cancel, or skip (never started: see skip.lua)
    data: str  # result JSON on success, else error JSON {class, message}; skip: the reason
    history: str  # attempt history entry JSON; skip: the skip entry JSON
    delay_ms: int = 0
    exc: BaseException | None = field(default=None, repr=False)  # for hooks; never stored


class StartRefused(Exception):
    """Raised inside the executor when an attempt's handler must not start (lease gone)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def start_by(claimed_at: float, lease: float) -> float:
    """Return the lease-clock instant after which a lease taken at claimed_at may not start."""
    return claimed_at + lease * START_WITHIN


def refusal(att: Attempt) -> str | None:
    """Return why the attempt's handler must not start now (its lease is gone), or None.

    Run out by our own clock comes first: after a pause both can hold, and which one a
    renewal noticed first must not decide the reason.
    """
    if clock.now() >= att.lease_until:
        return "lease_expired"
    if att.lost:
        return "lease_lost"
    return None


def _begin(att: Attempt) -> None:
    """Check the lease right before the handler is called; raise StartRefused if it is gone."""
    if failpoints.ACTIVE:
        failpoints.hit("worker.before_handler")  # a freeze here is what this check is for
    reason = refusal(att)
    if reason is not None:
        raise StartRefused(reason)
    att.began = True


def skipped(att: Attempt, worker_id: str, reason: str) -> Outcome:
    """Return the outcome of an attempt dropped before its handler started."""
    entry = {
        "attempt": att.attempt,
        "worker": worker_id,
        "entry": att.entry,
        "reason": reason,
        "at": time.time(),
    }
    return Outcome("skip", reason, codec.dumps(entry))


def _error_name(exc: BaseException) -> str:
    cls = type(exc)
    module = "dtq" if cls.__module__.startswith("dtq.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


def _message(exc: BaseException) -> str:
    """Return an exception's text; one whose __str__ raises must not fail the worker."""
    try:
        text = str(exc)
    except BaseException:
        text = f"<{type(exc).__name__}: str() failed>"
    return codec.truncate(text, MAX_MESSAGE)


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
        entry["message"] = _message(exc)
        text = "".join(traceback.format_exception(exc))
        entry["traceback"] = codec.truncate(text, MAX_TRACEBACK)
    return codec.dumps(entry)


def failure(att: Attempt, worker_id: str, exc: BaseException, retryable: bool) -> Outcome:
    """Classify a failed attempt: retry while attempts and policy allow, else fail."""
    error = codec.dumps({"class": _error_name(exc), "message": _message(exc)})
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


def _run_sync(att: Attempt, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a sync handler on the calling pool thread, checking its lease right before."""
    from django.db import close_old_connections

    _begin(att)  # on this thread: the process may have been frozen since the hand-off
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
        _begin(att)
        if att.timeout is None:
            return await task.func(*args, **kwargs)
        return await asyncio.wait_for(task.func(*args, **kwargs), att.timeout)
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(pool, _run_sync, att, task.func, args, kwargs)
    if att.timeout is None:
        return await future
    try:
        return await asyncio.wait_for(asyncio.shield(future), att.timeout)
    except TimeoutError:
        on_stuck(att, future)  # the thread cannot be killed; it keeps its slot
        raise


async def execute(
    att: Attempt, worker_id: str, context: Any, pool: Executor, on_stuck: Any
) -> Outcome:
    """Run one attempt, with its registry entry's hooks around it if it has them.

    An entry may define started(att, worker_id, context) -> the context its handler takes, and
    finished(att, worker_id, outcome, state), which the worker calls once finalize.lua decided
    the state (see report_finished); dtq.backends uses them for django.tasks' signals. They
    run on the pool, not on the loop, so their receivers may use the ORM.
    """
    entry = registry.get(att.name)
    if entry is None or not hasattr(entry, "started"):
        return tracing.finish(att, await _execute(att, worker_id, context, pool, on_stuck))
    reason = refusal(att)
    if reason is not None:
        return skipped(att, worker_id, reason)  # no hook either: for them it never started
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
    if outcome.kind == "skip":
        return outcome  # the lease ran out while the started hook ran: the handler did not
    return tracing.finish(att, outcome)


def report_finished(att: Attempt, worker_id: str, outcome: Outcome, state: str) -> None:
    """Call the finished hook of att's entry with the state finalize.lua decided ('' fenced)."""
    entry = registry.get(att.name)
    if entry is not None and hasattr(entry, "finished"):
        _hook(entry.finished, None, att, worker_id, outcome, state)


def has_finished_hook(att: Attempt) -> bool:
    """Return True when att's registry entry wants to hear how its attempts ended."""
    return hasattr(registry.get(att.name), "finished")


def _hook(method: Any, default: Any, att: Attempt, *args: Any) -> Any:
    """Call a registry entry's hook; a failing hook is logged and never fails the attempt."""
    try:
        return method(att, *args)
    except BaseException:  # a receiver's sys.exit() must not end the worker either
        log.exception("task_id=%s: %s hook failed", att.id, getattr(method, "__name__", "?"))
        return default


async def _execute(
    att: Attempt, worker_id: str, context: Any, pool: Executor, on_stuck: Any
) -> Outcome:
    """Run the handler of one attempt and return its outcome (never raises)."""
    try:
        task, args, kwargs = prepare_call(att, context)
    except PermanentError as exc:
        return failure(att, worker_id, exc, retryable=False)
    try:
        value = await _call(task, args, kwargs, att, pool, on_stuck)
    except StartRefused as exc:
        return skipped(att, worker_id, exc.reason)
    except TimeoutError:
        timeout = TaskTimeout(f"handler ran past its timeout of {att.timeout}s")
        return failure(att, worker_id, timeout, retryable=True)
    except asyncio.CancelledError as exc:
        if att.cancel.is_set():
            return failure(att, worker_id, TaskCancelled("cancelled on request"), False)
        if _being_cancelled():
            raise  # worker shutdown: leave the attempt unfinalized for the reaper
        return classify(att, worker_id, task, exc)  # the handler raised it itself
    except BaseException as exc:  # SystemExit & co. end this attempt, never the worker
        return classify(att, worker_id, task, exc)
    return success(att, worker_id, value)


def _being_cancelled() -> bool:
    """Return True when someone called cancel() on the running asyncio task."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def classify(att: Attempt, worker_id: str, task: Any, exc: BaseException) -> Outcome:
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
        value = (run or _run_sync)(att, task.func, args, kwargs)
    except StartRefused as exc:
        return skipped(att, worker_id, exc.reason)
    except BaseException as exc:  # on a pool thread, every BaseException is the handler's
        return tracing.finish(att, classify(att, worker_id, task, exc))
    return tracing.finish(att, success(att, worker_id, value))


class HandlerPool(ThreadPoolExecutor):
    """The worker's pool; plain sync attempts run on its own threads without a Future each.

    Per call, a ThreadPoolExecutor makes a Future (a lock and a condition), a work item and a
    done callback, and takes a semaphore: on the worker's hot path that cost more CPU than a
    no-op handler. run_plain is a queue put and a call; submit (hooks, timeouts) is as ever.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "dtq-task") -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._size = max_workers
        self._plain: queue.SimpleQueue[tuple[Any, tuple[Any, ...], Any] | None] = (
            queue.SimpleQueue()
        )
        self._plain_threads: list[threading.Thread] = []
        self._prefix = thread_name_prefix
        self._handed = False  # a plain call was put since the last hand_over

    def run_plain(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """Run fn(*args) on a pool thread, then done(result, None) or done(None, exc) there."""
        if not self._plain_threads:  # all at once: the worker keeps them busy
            for i in range(self._size):
                # Not daemons, as a ThreadPoolExecutor's: the exit waits for what a handler
                # started (a progress Timer inherits daemon-ness); shutdown() ends them.
                name = f"{self._prefix}-p{i}"
                thread = threading.Thread(target=self._serve, name=name, daemon=False)
                thread.start()
                self._plain_threads.append(thread)
        self._plain.put((fn, args, done))
        self._handed = True

    def hand_over(self) -> None:
        """Let the threads that plain calls just woke run now, not when the caller next blocks.

        A woken thread needs the GIL, which the caller (the worker's loop) keeps until it
        blocks: at an idle worker's arrival, ~190 us of the loop's own work before the handler
        started. sleep(0) releases the GIL at once, and the thread waiting for it takes it
        (docs/performance.md, ninth round).
        """
        if self._handed:
            self._handed = False
            time.sleep(0)

    def _serve(self) -> None:
        while (item := self._plain.get()) is not None:
            fn, args, done = item
            try:
                result, error = fn(*args), None
            except BaseException as exc:
                result, error = None, exc
            try:
                done(result, error)
            except BaseException:  # as a Future's callback: logged, and the thread serves on
                log.exception("a handler's outcome could not be handed to the worker")
            del item, fn, args, done, result, error  # hold nothing of it while idle

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop both kinds of threads; cancel_futures also drops plain calls not started."""
        if cancel_futures:
            while True:
                try:
                    self._plain.get_nowait()
                except queue.Empty:
                    break
        for _ in self._plain_threads:
            self._plain.put(None)
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:
            for thread in self._plain_threads:
                thread.join()
