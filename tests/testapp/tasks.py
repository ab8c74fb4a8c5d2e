"""Handlers used by the tests. Each execution can be witnessed in a file outside Redis."""

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import dtq
from dtq.compat import task as django_task


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


# The queues the tests route `record` to; with DTQ['QUEUES'] unset they are declared by it.
OTHER_QUEUES = [
    *("other", "third", "elsewhere", "rescue", "dead", "again", "emails", "reports", "x", "q"),
    *("qa", "qb", "qc", *(f"q{n}" for n in range(10))),
]


@dtq.task(queue_name="tests", takes_context=True, queues=OTHER_QUEUES, max_priority=100)
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


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
async def async_poison(context: dtq.TaskContext) -> None:
    """Always raise an ordinary exception, from a coroutine."""
    witness("async_poison", context)
    raise ValueError("async poison")


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


@dtq.task(queue_name="perf")
def noop() -> None:
    """Do nothing (benchmarks)."""


@dtq.task(queue_name="perf")
async def async_noop() -> None:
    """Do nothing, asynchronously (benchmarks)."""


# ----- task control (tests/test_ops_*.py) -------------------------------------------------


@dtq.task(queue_name="tests", takes_context=True)
def cancellable(context: dtq.TaskContext, seconds: float) -> str:
    """Poll context.cancel_requested for up to `seconds`; stop with TaskCancelled when set."""
    witness("cancellable", context, phase="start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if context.cancel_requested:
            witness("cancellable", context, phase="stopped")
            raise dtq.TaskCancelled("stopped on request")
        time.sleep(0.02)
    return "finished"


@dtq.task(queue_name="tests", takes_context=True)
async def async_cancellable(context: dtq.TaskContext, seconds: float) -> str:
    """Sleep asynchronously; the worker interrupts it when a cancel is requested."""
    witness("async_cancellable", context, phase="start")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        witness("async_cancellable", context, phase="interrupted")
        raise
    return "finished"


@dtq.task(queue_name="tests", takes_context=True)
def ignores_cancel(context: dtq.TaskContext, seconds: float) -> str:
    """See the cancel request, then finish normally anyway."""
    witness("ignores_cancel", context, phase="start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not context.cancel_requested:
        time.sleep(0.02)
    witness("ignores_cancel", context, phase="end", saw=context.cancel_requested)
    return "done anyway"


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
def retries_after_cancel(context: dtq.TaskContext, seconds: float) -> None:
    """Wait for the cancel request, then ask for a retry (which must not be granted)."""
    witness("retries_after_cancel", context)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not context.cancel_requested:
        time.sleep(0.02)
    raise dtq.RetryableError("retry please")


@dtq.task(queue_name="tests", takes_context=True, max_attempts=4)
def op_flaky(context: dtq.TaskContext, key: str) -> object:
    """Idempotent operation that fails on attempt 1; the task itself fails once after it."""

    def charge() -> dict[str, int]:
        witness("op_flaky.fn", context)
        if context.attempt == 1:
            raise ValueError("payment gateway hiccup")
        return {"charged_on_attempt": context.attempt}

    result = dtq.idempotent_operation(key, charge)
    if context.attempt == 2:
        raise dtq.RetryableError("fails after the operation succeeded")
    return result


@dtq.task(queue_name="tests", takes_context=True, max_attempts=5)
def op_once(context: dtq.TaskContext, key: str, lease: float = 1.0) -> object:
    """Idempotent operation that witnesses each run of its function."""

    def work() -> dict[str, int]:
        witness("op_once.fn", context)
        return {"ran_on_attempt": context.attempt}

    return dtq.idempotent_operation(key, work, lease=lease)


@dtq.task(queue_name="tests", max_attempts=2)
def huge_error(depth: int = 150) -> None:
    """Fail with a deep traceback and a huge message full of non-ASCII (and a lone surrogate)."""

    def recurse(n: int) -> None:
        if n == 0:
            raise ValueError("ünïcödé ☃ 😀 \ud800 " * 20000)
        recurse(n - 1)

    recurse(depth)


@dtq.task(queue_name="perf")
def stamp(sent: float) -> None:
    """Record how long the task waited between enqueue and handler start (benchmarks)."""
    path = os.environ.get("DTQ_LATENCY_LOG")
    if path:
        with Path(path).open("a") as fh:
            fh.write(f"{time.time() - sent}\n")


# ----- BaseException from handlers (tests/test_handler_exits.py) --------------------------


class Halt(BaseException):
    """A BaseException subclass of a task's own (not an Exception)."""


def base_exception(kind: str) -> BaseException:
    """Return the BaseException a handler raises for `kind`."""
    made: dict[str, BaseException] = {
        "exit": SystemExit(3),
        "interrupt": KeyboardInterrupt("interrupted"),
        "generator_exit": GeneratorExit("generator closed"),
        "halt": Halt("halted"),
        "cancelled": asyncio.CancelledError("cancelled by the handler"),
    }
    return made[kind]


@dtq.task(queue_name="tests", takes_context=True, max_attempts=2)
def bail(context: dtq.TaskContext, kind: str) -> None:
    """Witness, then raise a BaseException (sys.exit() for kind 'exit')."""
    witness("bail", context, kind=kind)
    if kind == "exit":
        sys.exit(3)
    raise base_exception(kind)


@dtq.task(queue_name="tests", takes_context=True, max_attempts=2)
async def async_bail(context: dtq.TaskContext, kind: str) -> None:
    """Witness, then raise a BaseException from a coroutine."""
    await asyncio.sleep(0)
    witness("async_bail", context, kind=kind)
    raise base_exception(kind)


@dtq.task(queue_name="tests", takes_context=True, max_attempts=2, retry_on=(Exception, Halt))
def halts(context: dtq.TaskContext) -> int:
    """Raise Halt on attempt 1 (listed in retry_on, so it is retried), then succeed."""
    witness("halts", context)
    if context.attempt == 1:
        raise Halt("first attempt halts")
    return context.attempt


@django_task(queue_name="tests")
def dj_exits() -> None:
    """A django.tasks task that calls sys.exit() (as Django's test_catches_exception does)."""
    sys.exit(1)


@django_task(queue_name="tests", takes_context=True)
def dj_steps(context: Any, n: int) -> int:
    """A django.tasks task that reports progress n times in a row through its context."""
    for i in range(1, n + 1):
        context.progress(i / n, f"dj step {i} of {n}")
    return n


@django_task(queue_name="tests", takes_context=True)
async def dj_asteps(context: Any, n: int) -> int:
    """The async form: aprogress n times in a row."""
    for i in range(1, n + 1):
        await context.aprogress(i / n, f"dj async step {i}")
    return n


class Unprintable(Exception):
    """An exception whose __str__ itself raises."""

    def __str__(self) -> str:
        raise SystemExit("str() of this exception exits")


@dtq.task(queue_name="tests", max_attempts=1)
def unprintable() -> None:
    """Raise an exception that cannot be turned into text."""
    raise Unprintable()


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
def crash_once(context: dtq.TaskContext) -> int:
    """SIGKILL the worker running the first attempt; later attempts return their number."""
    witness("crash_once", context)
    if context.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return context.attempt


@dtq.task(queue_name="tests", takes_context=True)
def steps(context: dtq.TaskContext, n: int, pause: float = 0.0) -> int:
    """Report progress i/n after each of n steps of `pause` seconds."""
    for i in range(1, n + 1):
        time.sleep(pause)
        context.progress(i / n, f"step {i} of {n}")
    return n


@dtq.task(queue_name="tests", takes_context=True)
async def asteps(context: dtq.TaskContext, n: int) -> int:
    """Report progress from async code, n times in a row."""
    for i in range(1, n + 1):
        await context.aprogress(i / n, f"async step {i}")
    return n


# ----- flow control (tests/test_flow_control.py) ------------------------------------------


@dtq.task(queue_name="tests", takes_context=True, max_concurrency=2)
def pair_limited(context: dtq.TaskContext, seconds: float) -> None:
    """Witness start and end around a sleep; at most two run at once, fleet-wide."""
    witness("pair_limited", context, phase="start")
    time.sleep(seconds)
    witness("pair_limited", context, phase="end")


@dtq.task(queue_name="tests", takes_context=True, rate_limit="20/s")
def rated(context: dtq.TaskContext) -> None:
    """Witness the start; at most 20 starts a second, fleet-wide."""
    witness("rated", context)


@dtq.task(queue_name="tests", takes_context=True, max_concurrency=1, concurrency_key="customer")
def per_customer(context: dtq.TaskContext, customer: str, seq: int, seconds: float) -> None:
    """Witness start and end; one at a time per customer, in submission order."""
    witness("per_customer", context, phase="start", customer=customer, seq=seq)
    time.sleep(seconds)
    witness("per_customer", context, phase="end", customer=customer, seq=seq)


@dtq.task(queue_name="tests", takes_context=True, queues=OTHER_QUEUES)
def paced(context: dtq.TaskContext, seconds: float) -> None:
    """Witness start and end around a sleep (no limits of its own: for queue limits)."""
    witness("paced", context, phase="start")
    time.sleep(seconds)
    witness("paced", context, phase="end")


# ----- workflows (tests/test_workflows.py) ----------------------------------------------------


@dtq.task(queue_name="tests", takes_context=True)
def wf_add(context: dtq.TaskContext, x: int, y: int = 0) -> int:
    """Return x + y, witnessed."""
    witness("wf_add", context, args=[x, y])
    return x + y


@dtq.task(queue_name="tests", takes_context=True, max_attempts=20)
def wf_collect(context: dtq.TaskContext, values: object, *rest: object) -> object:
    """Return the list it got (a chord callback), witnessed."""
    witness("wf_collect", context, args=[values, *rest])
    return values


@dtq.task(queue_name="tests", takes_context=True, max_attempts=1)
def wf_fail(context: dtq.TaskContext, *args: object) -> None:
    """Fail permanently (straight to the DLQ), witnessed."""
    witness("wf_fail", context, args=list(args))
    raise dtq.PermanentError("wf_fail always fails")


@dtq.task(queue_name="tests", takes_context=True, max_attempts=1)
def wf_fail_unless(context: dtq.TaskContext, flag: str, *args: object) -> str:
    """Fail unless the file named by flag exists (a DLQ replay then succeeds), witnessed."""
    witness("wf_fail_unless", context, args=list(args))
    if not Path(flag).exists():
        raise dtq.PermanentError("flag file missing")
    return "fixed"


@dtq.task(queue_name="tests", takes_context=True, max_attempts=20)
def wf_slow(context: dtq.TaskContext, value: int, seconds: float = 0.05) -> int:
    """Sleep a little (so SIGKILLs land mid-run), then return value, witnessed."""
    witness("wf_slow", context, value=value)
    time.sleep(seconds)
    return value
