"""The read budget: how many Redis commands one request's reads may send in total.

A surface (an API request, an admin page, a dtq_status run) opens one budget with
read_budget(); every read in read_side/ charges the commands it is about to send and sizes its
pages to what is left, so a request's cost is bounded by DTQ['READ_BUDGET'] whatever its
parameters and however many queues, tasks or DLQ entries there are. A read outside any open
budget gets a fresh one of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine.errors import ReadBudgetExceeded

_current: ContextVar[Budget | None] = ContextVar("dtq_read_budget", default=None)


@dataclass(slots=True)
class Budget:
    """Commands a request may still send; `partial` is set when a read stopped short."""

    limit: int
    spent: int = 0
    partial: bool = False

    @property
    def left(self) -> int:
        """Return how many commands are left."""
        return max(self.limit - self.spent, 0)

    def charge(self, n: int) -> None:
        """Count n commands about to be sent; raise ReadBudgetExceeded if they do not fit."""
        if self.spent + n > self.limit:
            raise ReadBudgetExceeded(self.limit, self.spent + n)
        self.spent += n


@contextmanager
def read_budget(limit: int | None = None) -> Iterator[Budget]:
    """Share one budget among every read inside the block (a nested block joins the outer)."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    budget = Budget(int(limit or dtq_settings.READ_BUDGET))
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def current() -> Budget:
    """Return the open budget, or a fresh one for a single read outside any block."""
    return _current.get() or Budget(dtq_settings.READ_BUDGET)


def execute(pipe: Any, budget: Budget | None = None, raise_on_error: bool = True) -> list[Any]:
    """Charge a pipeline's commands to the budget, then send them in one round trip."""
    (budget or current()).charge(len(pipe))
    return list(pipe.execute(raise_on_error=raise_on_error))
