"""The @dtq.periodic decorator and the list of every schedule (code and database)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from dtq.engine.cron import Timing
from dtq.engine.errors import InvalidTaskError, ScheduleNotFound
from dtq.engine.firing import Schedule

_lock = threading.Lock()
_code: dict[str, Schedule] = {}


def periodic(
    *,
    cron: str | None = None,
    every: timedelta | None = None,
    timezone: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    queue_name: str | None = None,
    catch_up: str = "latest",
    catch_up_window: timedelta = timedelta(days=1),
    overlap: str = "allow",
    description: str = "",
) -> Any:
    """Fire the task below on a schedule; place it above @dtq.task or @django.tasks.task."""
    timing = Timing.of(cron, every, timezone)

    def wrap(task: Any) -> Any:
        task_name = _task_name(task)
        schedule = Schedule(
            name=name or task_name,
            timing=timing,
            task_name=task_name,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            queue=queue_name,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            overlap=overlap,
            description=description or (getattr(task.func, "__doc__", "") or "").strip(),
        )
        register(schedule)
        return task

    return wrap


def _task_name(task: Any) -> str:
    """Return the registry name of a dtq or django.tasks task (checks it is one)."""
    from dtq.task import Task

    if isinstance(task, Task):
        return task.name
    module_path = getattr(task, "module_path", None)
    if module_path and hasattr(task, "get_backend"):
        return str(module_path)  # a django.tasks Task on a DtqBackend registers this name
    raise InvalidTaskError("@dtq.periodic goes above @dtq.task(...) or @django.tasks.task(...)")


def register(schedule: Schedule) -> None:
    """Add a code-defined schedule; the same name for another definition is an error."""
    with _lock:
        current = _code.get(schedule.name)
        if current is not None and current != schedule:
            raise InvalidTaskError(f"schedule name {schedule.name!r} is already defined")
        _code[schedule.name] = schedule


def unregister(name: str) -> None:
    """Forget a code-defined schedule (tests)."""
    with _lock:
        _code.pop(name, None)


def code_schedules() -> list[Schedule]:
    """Return the schedules defined with @dtq.periodic, sorted by name."""
    with _lock:
        return [_code[name] for name in sorted(_code)]


def all_schedules() -> list[Schedule]:
    """Return every enabled schedule: code-defined ones, then the database's."""
    schedules = code_schedules()
    names = {s.name for s in schedules}
    return schedules + [s for s in database_schedules() if s.name not in names]


def database_schedules() -> list[Schedule]:
    """Return the enabled schedules stored in the database (none until the model exists)."""
    return []


def get(name: str) -> Schedule:
    """Return the schedule of this name, or raise ScheduleNotFound."""
    found = next((s for s in all_schedules() if s.name == name), None)
    if found is None:
        raise ScheduleNotFound(name)
    return found
