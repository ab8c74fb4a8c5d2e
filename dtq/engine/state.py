"""Task states and their groups."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Where a task is in its lifecycle."""

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"

    @property
    def is_terminal(self) -> bool:
        """Return True when the task will never run again by itself."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.DEAD_LETTERED,
        TaskState.CANCELLED,
        TaskState.EXPIRED,
    }
)
