"""The @dtq.periodic decorator and the list of every schedule (code and database)."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db import close_old_connections

from dtq.engine.cron import Timing
from dtq.engine.errors import DtqError, InvalidTaskError, ScheduleNotFound
from dtq.engine.firing import Schedule

RELOAD_SECONDS = 2.0  # how soon a scheduler sees a schedule edited in the database
log = logging.getLogger("dtq.scheduler")
_lock = threading.Lock()
_code: dict[str, Schedule] = {}
_loaded: list[Schedule] | None = None  # the database's schedules, as a scheduler last read them
_loaded_at = 0.0
_failing = False


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
    """Return the enabled, valid schedules stored in the database (invalid rows are logged)."""
    from dtq.models import PeriodicSchedule

    out = []
    for row in PeriodicSchedule.objects.filter(enabled=True):
        try:
            out.append(row.as_schedule())
        except DtqError as exc:  # edited outside clean(): never let one row stop the others
            log.warning("schedule=%s is not loaded: %s", row.name, exc)
    return out


def schedules_for_firing(max_age: float = RELOAD_SECONDS) -> list[Schedule]:
    """Return all_schedules(), re-read from the database at most every max_age seconds.

    A database that cannot be read keeps the last list (and code schedules fire anyway), so a
    scheduler never stops firing because of the database.
    """
    global _loaded_at, _loaded, _failing
    now = time.monotonic()
    if _loaded is None or now - _loaded_at >= max_age:
        try:
            fresh = database_schedules()
            close_old_connections()  # a scheduler thread must not hold a dead connection
            _failing = False
        except Exception as exc:  # a scheduler must go on firing without its database
            # one warning per failure streak, not one every RELOAD_SECONDS
            (log.debug if _failing else log.warning)(
                "database schedules not read (keeping the last list): %s", exc
            )
            _failing = True
            fresh = _loaded or []
        _loaded, _loaded_at = fresh, now
    code = code_schedules()
    names = {s.name for s in code}
    return code + [s for s in _loaded if s.name not in names]


def check_definition(schedule: Schedule) -> None:
    """Raise InvalidTaskError unless the task exists and the arguments fit its signature."""
    from dtq.engine import registry

    if schedule.source == "database" and schedule.name in _code:
        raise InvalidTaskError(f"schedule name {schedule.name!r} is defined in code")
    task = registry.get(schedule.task_name)
    if task is None:
        raise InvalidTaskError(f"no task named {schedule.task_name!r} (known: {_some_names()})")
    params = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        params = params[1:]
    try:
        inspect.Signature(params).bind(*schedule.args, **schedule.kwargs)
    except TypeError as exc:
        raise InvalidTaskError(f"arguments do not fit {schedule.task_name}: {exc}") from None


def _some_names() -> str:
    from dtq.engine import registry

    names = registry.names()
    return ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")


def get(name: str) -> Schedule:
    """Return the schedule of this name, or raise ScheduleNotFound."""
    found = next((s for s in all_schedules() if s.name == name), None)
    if found is None:
        raise ScheduleNotFound(name)
    return found
