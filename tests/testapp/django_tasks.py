"""Standard django.tasks tasks run by dtq (TASKS in tests/settings.py), and signal witnesses."""

import asyncio
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.dispatch import receiver

import dtq
from dtq.compat import (
    TASK_TAKES_OPTIONS,
    TaskContext,
    task,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.testapp.tasks import witness


@task(queue_name="tests")
def add(a: int, b: int) -> int:
    """Add two numbers."""
    witness("dj_add", a=a, b=b)
    return a + b


@task(queue_name="tests")
def boom(message: str = "boom") -> None:
    """Always raise ValueError."""
    raise ValueError(message)


@task(queue_name="tests", takes_context=True)
def flaky(context: TaskContext, failures: int, delay: float = 0.05) -> int:
    """Ask for a retry (after `delay` seconds) on the first `failures` attempts."""
    witness("dj_flaky", id=context.task_result.id, attempt=context.attempt)
    if context.attempt <= failures:
        raise dtq.RetryableError(f"attempt {context.attempt} fails", delay=delay)
    return context.attempt


@task(queue_name="tests", takes_context=True)
def with_context(context: TaskContext, value: Any = None) -> dict[str, Any]:
    """Return what the context says about this run."""
    result = context.task_result
    return {
        "context": type(context).__name__,
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "state": str(getattr(result, "state", "")),  # dtq's precise state, on DtqBackend
        "args": result.args,
        "workers": len(result.worker_ids),
        "value": value,
    }


@task(queue_name="tests", takes_context=True)
def scheduled(context: TaskContext) -> str | None:
    """Return the slot a periodic firing is for (tests/test_periodic_django.py)."""
    slot = getattr(context, "scheduled_at", None)
    return None if slot is None else slot.isoformat()


@task(queue_name="tests", priority=50)
async def async_double(x: int) -> int:
    """Double x after yielding to the event loop."""
    await asyncio.sleep(0)
    return x * 2


@task(queue_name="tests")
def probe(label: str) -> str:
    """Witness the order tasks run in."""
    witness("dj_probe", label=label)
    return label


@task(queue_name="tests")
def create_user(username: str) -> int:
    """Create a user (a task that writes to the database) and return its primary key."""
    from django.contrib.auth.models import User

    return int(User.objects.create(username=username).pk)


@task(queue_name="tests")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Return the arguments as the handler received them."""
    return {"args": list(args), "kwargs": kwargs}


SAMPLES: dict[str, Any] = {
    "int-keys-and-tuples": {1: "a", "b": [2, (3, 4)]},
    "tuple": (1, "two", None, True, 2.5),
    "bytes": b"utf-8 bytes",
    "other-scalar-keys": {None: 1, False: 2, 1.5: 3},
    "datetime": datetime(2030, 1, 1, tzinfo=UTC),
    "decimal": Decimal("1.5"),
    "set": {1, 2},
    "undecodable-bytes": b"\xff\xfe",
    "tuple-key": {(1, 2): "tuple key"},
}


@task(queue_name="tests")
def give_back(sample: str) -> Any:
    """Return SAMPLES[sample] unchanged (its encoding is the backend's business)."""
    return SAMPLES[sample]


@task(queue_name="tests")
def returns_datetime() -> Any:
    """Return a value django.tasks cannot encode (a datetime)."""
    return datetime(2030, 1, 1, tzinfo=UTC)


@task(queue_name="tests")
def returns_function() -> Any:
    """Return a value neither JSON nor anything else can carry."""
    return lambda: True


@task(queue_name="tests")
def nested_error() -> None:
    """Raise an exception whose argument is an exception."""
    raise ValueError(ValueError("inner failure"))


@task(queue_name="tests")
def exits() -> None:
    """Raise SystemExit, as sys.exit() does."""
    raise SystemExit("task called sys.exit")


@task(queue_name="tests")
def interrupted() -> None:
    """Raise KeyboardInterrupt from inside the handler."""
    raise KeyboardInterrupt("task raised KeyboardInterrupt")


if TASK_TAKES_OPTIONS:  # @task(**options) reaches DtqTask on Django 6.1 and the backport

    @task(queue_name="tests", max_attempts=2, timeout=30, ttl=600, retry_on=(ValueError,))
    def configured(kind: str) -> str:
        """Raise ValueError (retried) or TypeError (not retried) per `kind`."""
        witness("dj_configured", kind=kind)
        if kind == "value":
            raise ValueError("retry me")
        if kind == "type":
            raise TypeError("do not retry me")
        return kind


def _ours(task_result: Any) -> bool:
    return bool(task_result.task.module_path.startswith(__name__))


def _witness_signal(name: str, sender: type, task_result: Any) -> None:
    if _ours(task_result):
        witness(
            "dj_signal",
            signal=name,
            id=task_result.id,
            status=str(task_result.status),
            sender=sender.__name__,
            attempt=task_result.attempts,
            exc_info=getattr(sys.exc_info()[0], "__name__", None),
        )


@receiver(task_enqueued)
def _on_enqueued(sender: type, task_result: Any, **kwargs: Any) -> None:
    _witness_signal("enqueued", sender, task_result)


@receiver(task_started)
def _on_started(sender: type, task_result: Any, **kwargs: Any) -> None:
    _witness_signal("started", sender, task_result)


@receiver(task_finished)
def _on_finished(sender: type, task_result: Any, **kwargs: Any) -> None:
    _witness_signal("finished", sender, task_result)


if TASK_TAKES_OPTIONS:

    @task(queue_name="tests", max_concurrency=1, concurrency_key="account")
    def dj_serialized(account: str, seq: int) -> int:
        """One run per account at a time (flow control through django.tasks' @task)."""
        witness("dj_serialized", account=account, seq=seq)
        return seq
