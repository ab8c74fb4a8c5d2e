"""Context propagation: carry request-scoped values (request id, tenant, user, locale...) from
enqueue() to every attempt of the task (docs/propagation.md).

A propagator captures a JSON value when a task is enqueued; dtq stores the values beside the
task's arguments (the payload's "ctx" member, never passed to the handler) and each attempt
runs inside the propagators' restore() for the values it carried. With no propagator
registered, nothing is captured and the payload is exactly what it was.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("dtq.propagation")


class Propagator(Protocol):
    """Captures one value at enqueue and restores it around each attempt."""

    name: str

    def capture(self) -> Any:
        """Return the JSON value to carry (None: nothing to carry)."""

    def restore(self, value: Any) -> AbstractContextManager[Any]:
        """Return a context manager that makes the value current while an attempt runs."""


_propagators: dict[str, Propagator] = {}


def register(propagator: Propagator) -> Propagator:
    """Carry this propagator's value with every task enqueued from now on; return it."""
    if not propagator.name or not isinstance(propagator.name, str):
        raise ValueError(f"a propagator needs a non-empty name, got {propagator.name!r}")
    _propagators[propagator.name] = propagator
    return propagator


def unregister(name: str) -> None:
    """Stop carrying the value of the propagator of that name."""
    _propagators.pop(name, None)


def registered() -> list[str]:
    """Return the names of the registered propagators."""
    return list(_propagators)


def capture() -> dict[str, Any]:
    """Return every registered propagator's current value (none that is None)."""
    if not _propagators:
        return {}
    values = {}
    for name, propagator in _propagators.items():
        value = propagator.capture()
        if value is not None:
            values[name] = value
    return values


@contextmanager
def restored(values: dict[str, Any]) -> Iterator[None]:
    """Run the block inside each carried value's restore(); unknown names are skipped.

    A restore that raises is logged and skipped: a context value never fails the task.
    """
    with contextlib.ExitStack() as stack:
        for name, value in values.items():
            propagator = _propagators.get(name)
            if propagator is None:
                continue  # enqueued by a process with a propagator this one lacks
            try:
                stack.enter_context(propagator.restore(value))
            except Exception:
                log.exception("propagator %r failed to restore %r", name, value)
        yield


def bind(
    func: Callable[..., Any],
    values: dict[str, Any],
    is_async: bool,
    inner: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Callable[..., Any]:
    """Return func wrapped to run inside the restored values (and then inner(), if given),
    on the thread or event loop the handler runs on."""

    @contextmanager
    def around() -> Iterator[None]:
        with restored(values), inner() if inner else contextlib.nullcontext():
            yield

    if is_async:

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with around():
                return await func(*args, **kwargs)

        return run_async

    def run(*args: Any, **kwargs: Any) -> Any:
        with around():
            return func(*args, **kwargs)

    return run


# ----- ready-made propagators ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextVarPropagator:
    """Carries a ContextVar holding a JSON value (a request id, a tenant, a user id)."""

    name: str
    var: ContextVar[Any]

    def capture(self) -> Any:
        """Return the variable's value in the enqueuing context (None when unset)."""
        return self.var.get(None)

    @contextmanager
    def restore(self, value: Any) -> Iterator[None]:
        """Set the variable for the attempt, and reset it after."""
        token = self.var.set(value)
        try:
            yield
        finally:
            self.var.reset(token)


@dataclass(frozen=True, slots=True)
class LanguagePropagator:
    """Carries Django's active language, so a task renders text in the requester's locale."""

    name: str = "language"

    def capture(self) -> Any:
        """Return the active language code (None outside any activation)."""
        from django.utils import translation

        return translation.get_language()

    def restore(self, value: Any) -> AbstractContextManager[Any]:
        """Activate the language for the attempt."""
        from django.utils import translation

        return translation.override(value)
