"""Exceptions raised by dtq."""

from __future__ import annotations


class DtqError(Exception):
    """Root of dtq's exceptions; never raised itself."""


class ConfigurationError(DtqError):
    """Raised when the DTQ settings are invalid."""


class InvalidTaskError(DtqError):
    """Raised when a task definition or its options are invalid."""


class SubmitError(DtqError):
    """Raised when a submission is refused before anything is written."""


class PayloadError(SubmitError):
    """Raised when task arguments are not JSON-serializable or too large."""


class QueueFull(SubmitError):
    """Raised when a queue is at its depth limit; retry after `retry_after` seconds."""

    def __init__(self, queue: str, limit: int, retry_after: int) -> None:
        super().__init__(f"queue {queue!r} is full ({limit} tasks); retry after {retry_after}s")
        self.queue = queue
        self.limit = limit
        self.retry_after = retry_after


class IdempotencyConflict(SubmitError):
    """Raised when an idempotency key is reused with a different payload."""

    def __init__(self, key: str, task_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was used for task {task_id} with another payload"
        )
        self.key = key
        self.task_id = task_id


class IdempotencyInProgress(SubmitError):
    """Raised when an idempotency key's task has not finished yet."""

    def __init__(self, key: str, task_id: str) -> None:
        super().__init__(f"idempotency key {key!r} is in progress as task {task_id}")
        self.key = key
        self.task_id = task_id


class TaskNotFound(DtqError):
    """Raised when no task record exists for an id (never created, or expired)."""


class RetryableError(DtqError):
    """Raised by a handler to ask for a retry with backoff."""

    def __init__(self, message: str = "", *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(DtqError):
    """Raised by a handler (or the worker) when retrying cannot help."""


class TaskCancelled(DtqError):
    """Raised inside a handler to stop after a cancel request."""


class TaskTimeout(RetryableError):
    """Raised when a handler runs past its timeout."""


class WorkerLost(DtqError):
    """Recorded when a task's worker died or stopped renewing its lease."""
