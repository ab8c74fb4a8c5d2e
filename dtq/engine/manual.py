"""Run a registered task by hand: arguments checked against its signature, one audit row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dtq.engine import registry
from dtq.engine.actions import AuditAction
from dtq.engine.audit import Actor, audited
from dtq.engine.declared import task_queues
from dtq.engine.edit import check_arguments, signature
from dtq.engine.errors import InvalidTaskError
from dtq.engine.submit import submit
from dtq.options import check_delay, check_priority


def catalogue() -> list[dict[str, Any]]:
    """Return every registered task with its signature and the queues it accepts."""
    found = []
    for name in registry.names():
        task = registry.get(name)
        if task is None or not hasattr(task, "func"):
            continue
        found.append({"name": name, "signature": signature(task), "queues": task_queues(task)})
    return found


def run_by_hand(
    name: str,
    *,
    actor: Actor,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    delay: float = 0,
    reason: str = "",
) -> str:
    """Submit one run of a registered task as an operator; return the new task id."""
    args, kwargs = list(args or []), dict(kwargs or {})
    params: dict[str, Any] = {"task": name, "args": args, "kwargs": kwargs, "queue": queue}
    params |= {"priority": priority, "delay": delay}
    with audited(
        actor, AuditAction.SUBMIT, queue=queue or "", reason=reason, parameters=params
    ) as report:
        task = registry.get(name)
        if task is None or not hasattr(task, "using"):
            raise InvalidTaskError(f"no dtq task named {name!r} is registered")
        check_arguments(task, args, kwargs)
        allowed = task_queues(task)
        queue = queue or allowed[0]
        if queue not in allowed:
            raise InvalidTaskError(f"task {name!r} accepts only the queues: {', '.join(allowed)}")
        report.queue = queue
        options: dict[str, Any] = {"queue_name": queue}
        if priority is not None:
            options["priority"] = check_priority(priority)
        if check_delay(delay):
            options["run_after"] = timedelta(seconds=delay)
        accepted = submit(task.using(**options).submission(tuple(args), kwargs))
        report.task_id = accepted.id
        report.affected = 1
        return accepted.id
