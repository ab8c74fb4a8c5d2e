"""Tasks the demo submits: successes, a flaky one, a poison one, a delayed one."""

import asyncio
import random
import time

import dtq
from dtq.compat import TaskContext
from dtq.compat import task as django_task


@dtq.task(queue_name="demo")
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@dtq.task(queue_name="demo")
def total(values: list[int]) -> int:
    """Sum a list of numbers (a chord's callback: dtq.chord(group, total.s()))."""
    return sum(values)


@dtq.task(queue_name="demo")
async def greet(name: str) -> str:
    """Say hello after a short asynchronous pause."""
    await asyncio.sleep(0.05)
    return f"Hello, {name}!"


@dtq.task(queue_name="demo", max_attempts=5, takes_context=True)
def flaky(context: dtq.TaskContext, fail_times: int) -> str:
    """Fail the first fail_times attempts, then succeed."""
    if context.attempt <= fail_times:
        raise dtq.RetryableError(f"attempt {context.attempt} failed on purpose")
    return f"succeeded on attempt {context.attempt}"


@dtq.task(queue_name="demo", max_attempts=2)
def poison() -> None:
    """Always fail, so the task ends in the dead-letter queue."""
    raise ValueError("this task always fails")


@dtq.task(queue_name="demo")
def roll_dice() -> int:
    """Return a random number."""
    return random.randint(1, 6)


@dtq.task(queue_name="demo", queues=["reports"])  # the demo also runs it on "reports"
def nap(seconds: float) -> float:
    """Sleep a little, so the admin dashboard has running tasks to show."""
    time.sleep(seconds)
    return seconds


# Standard django.tasks tasks: TASKS in settings.py sends them to dtq, and dtq_worker runs them.


@django_task(queue_name="demo", priority=60)
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


@django_task(queue_name="demo", takes_context=True)
def describe_run(context: TaskContext, label: str) -> str:
    """Say which attempt of which task this is (django's TaskContext)."""
    return f"{label}: attempt {context.attempt} of {context.task_result.id}"
