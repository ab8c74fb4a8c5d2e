"""The task registry: the only way a worker finds code to run for a task name."""

from __future__ import annotations

import threading
from importlib import import_module
from typing import Any

from dtq.engine.errors import InvalidTaskError

_lock = threading.Lock()
_tasks: dict[str, Any] = {}
_version = 0  # bumped by every registration, so what is derived from the tasks can be cached


def register(task: Any) -> None:
    """Add a task under its name; a different function under a taken name is an error."""
    global _version
    with _lock:
        current = _tasks.get(task.name)
        if current is not None and _origin(current) != _origin(task):
            raise InvalidTaskError(f"task name {task.name!r} is already used by {_origin(current)}")
        _tasks[task.name] = task
        _version += 1


def _origin(task: Any) -> str:
    func = task.func
    return f"{func.__module__}.{func.__qualname__}"


def get(name: str) -> Any | None:
    """Return the task registered under name, or None."""
    return _tasks.get(name)


def names() -> list[str]:
    """Return every registered task name, sorted."""
    return sorted(_tasks)


def tasks() -> list[Any]:
    """Return every registered task, by name."""
    return [_tasks[name] for name in sorted(_tasks)]


def version() -> int:
    """Return a number that changes whenever a task is registered."""
    return _version


def autodiscover() -> None:
    """Import each installed app's tasks module and every module in DTQ['TASK_MODULES']."""
    from django.utils.module_loading import autodiscover_modules

    from dtq.conf import dtq_settings

    autodiscover_modules("tasks")
    for module in dtq_settings.TASK_MODULES:
        import_module(module)
