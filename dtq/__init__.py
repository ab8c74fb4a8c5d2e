"""dtq: a Redis-backed task queue for Django with at-least-once delivery."""

from dtq.engine.errors import (
    BulkSubmitError,
    DtqError,
    NotInDeadLetterQueue,
    OperationInProgress,
    PermanentError,
    QueueFull,
    RetryableError,
    TaskAlreadyFinished,
    TaskCancelled,
    TaskNotFound,
    UnknownQueue,
    WritesRefused,
)
from dtq.engine.idempotency import idempotent_operation
from dtq.engine.state import TaskState
from dtq.result import TaskResult
from dtq.schedules import periodic
from dtq.task import Task, TaskContext, task

__all__ = [
    "BulkSubmitError",
    "DtqError",
    "NotInDeadLetterQueue",
    "OperationInProgress",
    "PermanentError",
    "QueueFull",
    "RetryableError",
    "Task",
    "TaskAlreadyFinished",
    "TaskCancelled",
    "TaskContext",
    "TaskNotFound",
    "TaskResult",
    "TaskState",
    "UnknownQueue",
    "WritesRefused",
    "idempotent_operation",
    "periodic",
    "task",
]
