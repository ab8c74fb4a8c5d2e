"""dtq: a Redis-backed task queue for Django with at-least-once delivery."""

from importlib.metadata import PackageNotFoundError, version

from dtq.canvas import (
    Signature,
    WorkflowNotFound,
    WorkflowResult,
    chain,
    chord,
    group,
    signature,
)
from dtq.engine.errors import (
    BulkSubmitError,
    DtqError,
    NotInDeadLetterQueue,
    NotReplicated,
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

try:
    __version__ = version("dtq")  # the one version, pyproject.toml's
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BulkSubmitError",
    "DtqError",
    "NotInDeadLetterQueue",
    "NotReplicated",
    "OperationInProgress",
    "PermanentError",
    "QueueFull",
    "RetryableError",
    "Signature",
    "Task",
    "TaskAlreadyFinished",
    "TaskCancelled",
    "TaskContext",
    "TaskNotFound",
    "TaskResult",
    "TaskState",
    "UnknownQueue",
    "WorkflowNotFound",
    "WorkflowResult",
    "WritesRefused",
    "__version__",
    "chain",
    "chord",
    "group",
    "idempotent_operation",
    "periodic",
    "signature",
    "task",
]
