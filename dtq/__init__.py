"""dtq: a Redis-backed task queue for Django with at-least-once delivery."""

from dtq.engine.errors import (
    DtqError,
    PermanentError,
    QueueFull,
    RetryableError,
    TaskCancelled,
    TaskNotFound,
)
from dtq.engine.state import TaskState
from dtq.result import TaskResult
from dtq.task import Task, TaskContext, task

__all__ = [
    "DtqError",
    "PermanentError",
    "QueueFull",
    "RetryableError",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskNotFound",
    "TaskResult",
    "TaskState",
    "task",
]
