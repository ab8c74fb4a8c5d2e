"""Chaos handlers. Each execution appends a start and an end row to a witness file of its own
process, outside Redis, so a Redis fault cannot erase the evidence of what ran."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dtq
from tests.chaos.config import QUEUE

WITNESS_ENV = "DTQ_CHAOS_WITNESS"  # a directory: one <pid>.jsonl file per process
STEP = 0.05  # seconds between cancel checks in sleeping handlers


def append(row: dict[str, Any]) -> None:
    """Append one JSON line to this process's witness file (one write: whole lines only)."""
    directory = os.environ.get(WITNESS_ENV)
    if not directory:
        return
    line = (json.dumps(row, separators=(",", ":")) + "\n").encode()
    fd = os.open(f"{directory}/{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def outcome_of(exc: BaseException) -> str:
    """Name what a handler's exception asks the worker to do."""
    if isinstance(exc, dtq.TaskCancelled | asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, dtq.RetryableError):
        return "retry"
    return "error"


@contextmanager
def execution(context: dtq.TaskContext, cls: str, **extra: Any) -> Iterator[None]:
    """Witness one handler execution: a start row now, an end row with its outcome after."""
    base = {"id": context.task_id, "attempt": context.attempt, "pid": os.getpid()}
    append({**base, "ev": "start", "t": time.time(), "cls": cls, **extra})
    outcome = "success"
    try:
        yield
    except BaseException as exc:
        outcome = outcome_of(exc)
        raise
    finally:
        append({**base, "ev": "end", "t": time.time(), "outcome": outcome})


def sleep_unless_cancelled(context: dtq.TaskContext, seconds: float) -> None:
    """Sleep, checking for a cancel request every STEP seconds (cooperative cancel)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if context.cancel_requested:
            raise dtq.TaskCancelled("cancel requested")
        time.sleep(min(STEP, left))


@dtq.task(name="chaos.ordinary", queue_name=QUEUE, takes_context=True)
def ordinary(context: dtq.TaskContext, seconds: float, key: str = "") -> int:
    """A short sync task (also used for delayed and idempotency-keyed submissions)."""
    with execution(context, "ordinary", key=key):
        sleep_unless_cancelled(context, seconds)
    return context.attempt


@dtq.task(name="chaos.gather", queue_name=QUEUE, takes_context=True)
def gather(context: dtq.TaskContext, values: list[Any]) -> list[Any]:
    """A chord's callback (the workflow class): return the list of its members' results."""
    with execution(context, "gather", inputs=len(values)):
        pass
    return values


@dtq.task(name="chaos.async", queue_name=QUEUE, takes_context=True)
async def async_ordinary(context: dtq.TaskContext, seconds: float) -> int:
    """A short async task; a cancel request interrupts it."""
    with execution(context, "async"):
        await asyncio.sleep(seconds)
    return context.attempt


@dtq.task(name="chaos.flaky", queue_name=QUEUE, takes_context=True)
def flaky(context: dtq.TaskContext, failures: int) -> int:
    """Raise a retryable error for the first `failures` attempts, then succeed."""
    with execution(context, "flaky"):
        if context.attempt <= failures:
            raise dtq.RetryableError(f"attempt {context.attempt} of {failures} failing", delay=0.1)
    return context.attempt


@dtq.task(name="chaos.poison", queue_name=QUEUE, takes_context=True, max_attempts=3)
def poison(context: dtq.TaskContext) -> None:
    """Always fail with an ordinary (retryable) exception."""
    with execution(context, "poison"):
        raise ValueError("poison")


@dtq.task(name="chaos.crasher", queue_name=QUEUE, takes_context=True, max_attempts=2)
def crasher(context: dtq.TaskContext) -> None:
    """SIGKILL the worker running it, every attempt."""
    append(
        {
            "id": context.task_id,
            "attempt": context.attempt,
            "pid": os.getpid(),
            "ev": "start",
            "t": time.time(),
            "cls": "crasher",
        }
    )
    os.kill(os.getpid(), signal.SIGKILL)


LIMITED_CONCURRENCY = 2  # the checker verifies no more ran at once, whatever the faults


@dtq.task(
    name="chaos.limited",
    queue_name=QUEUE,
    takes_context=True,
    max_concurrency=LIMITED_CONCURRENCY,
)
def limited(context: dtq.TaskContext, seconds: float) -> int:
    """A short task of which at most LIMITED_CONCURRENCY run at once, fleet-wide."""
    with execution(context, "limited"):
        sleep_unless_cancelled(context, seconds)
    return context.attempt


@dtq.task(name="chaos.sleep", queue_name=QUEUE, takes_context=True)
def sleeper(context: dtq.TaskContext, seconds: float) -> int:
    """Run for `seconds` (slow: near the lease timeout; long: several of them)."""
    with execution(context, "sleep", seconds=seconds):
        sleep_unless_cancelled(context, seconds)
    return context.attempt


@dtq.task(name="chaos.async_sleep", queue_name=QUEUE, takes_context=True)
async def async_sleeper(context: dtq.TaskContext, seconds: float) -> int:
    """An async long task: heartbeats keep it, a cancel request interrupts it."""
    with execution(context, "async_sleep", seconds=seconds):
        await asyncio.sleep(seconds)
    return context.attempt
