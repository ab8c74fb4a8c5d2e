"""Handlers used by the tests. Each execution can be witnessed in a file outside Redis."""

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import dtq


def witness(task: str, context: dtq.TaskContext | None = None, **extra: object) -> None:
    """Append one line per handler execution to $DTQ_WITNESS (if set)."""
    path = os.environ.get("DTQ_WITNESS")
    if not path:
        return
    row = {"task": task, "pid": os.getpid(), "t": time.time(), **extra}
    if context is not None:
        row.update(id=context.task_id, attempt=context.attempt)
    with Path(path).open("a") as fh:
        fh.write(json.dumps(row) + "\n")


@dtq.task(queue_name="tests", takes_context=True)
def record(context: dtq.TaskContext, value: object = None) -> object:
    """Witness the execution and return value."""
    witness("record", context)
    return value


@dtq.task(queue_name="tests", takes_context=True)
def hold(context: dtq.TaskContext, seconds: float) -> str:
    """Witness, then sleep (a long task)."""
    witness("hold", context, phase="start")
    time.sleep(seconds)
    witness("hold", context, phase="end")
    return "held"


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
def crasher(context: dtq.TaskContext) -> None:
    """Witness, then SIGKILL the worker running it."""
    witness("crasher", context)
    os.kill(os.getpid(), signal.SIGKILL)


@dtq.task(queue_name="tests", takes_context=True, max_attempts=4)
def flaky(context: dtq.TaskContext, failures: int) -> int:
    """Fail with a retryable error for the first `failures` attempts."""
    witness("flaky", context)
    if context.attempt <= failures:
        raise dtq.RetryableError(f"attempt {context.attempt} fails")
    return context.attempt


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
def poison(context: dtq.TaskContext) -> None:
    """Always raise an ordinary exception."""
    witness("poison", context)
    raise ValueError("poison")


@dtq.task(queue_name="tests", max_attempts=3)
def permanent() -> None:
    """Raise PermanentError: no retry."""
    raise dtq.PermanentError("no point retrying")


@dtq.task(queue_name="tests")
def unserializable() -> object:
    """Return something JSON cannot carry."""
    return {1, 2, 3}


@dtq.task(queue_name="tests", takes_context=True)
async def async_record(context: dtq.TaskContext, value: object = None) -> object:
    """Async handler that witnesses and returns value."""
    await asyncio.sleep(0)
    witness("async_record", context)
    return value


@dtq.task(queue_name="tests", max_attempts=1, timeout=0.3)
async def async_slow() -> None:
    """Async handler that overruns its timeout."""
    await asyncio.sleep(5)


@dtq.task(queue_name="tests", max_attempts=1, timeout=0.3)
def sync_slow() -> None:
    """Sync handler that overruns its timeout."""
    time.sleep(1.0)


@dtq.task(queue_name="tests", takes_context=True)
def priority_probe(context: dtq.TaskContext, label: str) -> str:
    """Witness the order tasks run in."""
    witness("priority", context, label=label)
    return label
