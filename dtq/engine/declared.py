"""Declared queues: the only queues a task can be submitted to, paused, or replayed into.

DTQ['QUEUES'] lists them. Unset (None), they are the default queue, every queue a registered
task names (its queue_name and the alternatives it accepts, `queues`), and the QUEUES of every
dtq backend in settings.TASKS. Nothing else creates a queue: a name outside this set is
refused with the list of allowed ones, before anything is written.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from dtq.conf import dtq_settings
from dtq.engine import registry
from dtq.engine.errors import UnknownQueue

SHOWN = 50  # allowed names an error message lists at most


def declared() -> frozenset[str]:
    """Return the declared queue names."""
    configured = dtq_settings.QUEUES
    if configured is not None:
        return _frozen(tuple(configured))
    return _derived(registry.version(), dtq_settings.DEFAULT_QUEUE, _backend_queues())


@functools.lru_cache(maxsize=8)
def _frozen(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(names)


@functools.lru_cache(maxsize=8)
def _derived(version: int, default: str, backends: tuple[str, ...]) -> frozenset[str]:
    # Keyed by the registry's version: submit checks the set on every call, cheaply.
    names = {default, *backends}
    for task in registry.tasks():
        names.update(task_queues(task))
    return frozenset(names)


def task_queues(task: object) -> list[str]:
    """Return the queues a registered task names: its own, then the alternatives it accepts."""
    inner = getattr(task, "task", None)  # a django.tasks task's registry entry wraps it
    own = getattr(inner if inner is not None else task, "queue_name", None)
    names = [own] if own else [dtq_settings.DEFAULT_QUEUE]
    return names + [q for q in getattr(task, "queues", None) or () if q not in names]


@functools.cache  # read on every submit; forgotten when TASKS changes (below)
def _backend_queues() -> tuple[str, ...]:
    found: list[str] = []
    for config in (getattr(settings, "TASKS", None) or {}).values():
        if str(config.get("BACKEND", "")).startswith("dtq.backends."):
            found += [q for q in config.get("QUEUES") or () if isinstance(q, str)]
    return tuple(found)


@receiver(setting_changed)
def _forget_backend_queues(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _backend_queues.cache_clear()


def describe(names: Iterable[str]) -> list[str]:
    """Return names sorted, the first SHOWN of them, with a count of the others."""
    ordered = sorted(names)
    if len(ordered) <= SHOWN:
        return ordered
    return [*ordered[:SHOWN], f"... ({len(ordered) - SHOWN} more)"]


def check_declared(queue: str) -> str:
    """Return queue if it is declared, else raise UnknownQueue naming the declared ones."""
    allowed = declared()
    if queue not in allowed:
        raise UnknownQueue(queue, describe(allowed))
    return queue
