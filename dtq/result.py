"""TaskResult: what enqueue returns and get_result reads back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from dtq.engine import read_side
from dtq.engine.errors import DtqError, TaskNotFound
from dtq.engine.state import TaskState


class ResultNotReady(DtqError):
    """Raised when return_value is read before the task succeeded."""


@dataclass(slots=True, kw_only=True)
class TaskResult:
    """The state of one task as last read from Redis; refresh() reads it again."""

    id: str
    name: str = ""
    queue_name: str = ""
    state: TaskState = TaskState.QUEUED
    attempt: int = 0
    max_attempts: int = 0
    duplicate: bool = False  # True when an idempotency key returned an earlier task
    errors: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    _return_value: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, task_id: str) -> TaskResult:
        """Read a task's current record; raise TaskNotFound if there is none."""
        result = cls(id=task_id)
        result.refresh()
        return result

    def refresh(self) -> None:
        """Re-read the record from Redis."""
        record = read_side.get_task(self.id)
        if record is None:
            raise TaskNotFound(f"no task {self.id!r} (never created, or past retention)")
        self.record = record
        self.name = record["name"]
        self.queue_name = record["queue"]
        self.state = TaskState(record["state"])
        self.attempt = record.get("attempt", 0)
        self.max_attempts = record.get("max_attempts", 0)
        self.history = record.get("history") or []
        self.errors = [h for h in self.history if h.get("error")]
        self._return_value = record.get("result")

    async def arefresh(self) -> None:
        """Re-read the record from Redis, from async code."""
        await sync_to_async(self.refresh, thread_sensitive=False)()

    @property
    def is_finished(self) -> bool:
        """Return True when the task reached a terminal state."""
        return self.state.is_terminal

    @property
    def return_value(self) -> Any:
        """Return the handler's return value; raise ResultNotReady before success."""
        if self.state != TaskState.SUCCEEDED:
            raise ResultNotReady(f"task {self.id} is {self.state}, not SUCCEEDED")
        return self._return_value

    @property
    def error(self) -> dict[str, Any] | None:
        """Return the last error recorded on the task ({class, message}), if any."""
        return self.record.get("error")
