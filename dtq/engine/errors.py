"""Exceptions raised by dtq."""

from __future__ import annotations

from typing import Any


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


class WritesRefused(SubmitError):
    """Raised when Redis refuses writes (out of memory, read-only replica, failed disk save)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"redis refuses writes ({detail}): the task was not accepted; retry later")
        self.reason = reason  # Redis' error code: OOM, READONLY or MISCONF
        self.detail = detail


class NotReplicated(SubmitError):
    """Raised when fewer replicas than SUBMIT_REPLICAS confirmed a write in time."""

    def __init__(self, what: str, wanted: int, got: int, timeout: float) -> None:
        super().__init__(
            f"{what} is on the primary, but only {got} of {wanted} replica(s) confirmed it "
            f"within {timeout:g}s: a failover now could lose it. It was not undone and may "
            "still run; resubmit with an idempotency key to be safe"
        )
        self.what = what
        self.wanted = wanted
        self.got = got


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


class BulkSubmitError(SubmitError):
    """Raised when items of a bulk submission were refused; `errors` maps each item to why.

    `results` holds what was accepted, by item index (None where refused): the accepted
    tasks stay accepted. When validation refused an item, nothing at all was submitted.
    """

    def __init__(self, errors: dict[int, DtqError], results: list[Any], submitted: bool) -> None:
        shown = "; ".join(f"item {i}: {exc}" for i, exc in list(errors.items())[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        outcome = f"{len(results) - len(errors)} accepted" if submitted else "nothing was submitted"
        super().__init__(
            f"{len(errors)} of {len(results)} submissions refused, {outcome}: {shown}{more}"
        )
        self.errors = errors
        self.results = results
        self.submitted = submitted


class TaskNotFound(DtqError):
    """Raised when no task record exists for an id (never created, or expired)."""


class ScheduleNotFound(DtqError):
    """Raised when no periodic schedule has the given name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}")
        self.name = name


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


class TaskExpired(DtqError):
    """Recorded when a task's TTL passed before it could start."""


class TaskAlreadyFinished(DtqError):
    """Raised when an operation needs a live task but the task already reached a final state."""

    def __init__(self, task_id: str, state: str) -> None:
        super().__init__(f"task {task_id} already finished ({state})")
        self.task_id = task_id
        self.state = state


class NotInDeadLetterQueue(DtqError):
    """Raised when a task has no DLQ entry (never dead-lettered, replayed, discarded, expired)."""

    def __init__(self, task_id: str, detail: str = "") -> None:
        super().__init__(f"task {task_id} is not in a dead-letter queue{detail}")
        self.task_id = task_id


class NotRetryable(DtqError):
    """Raised when a task to retry is not FAILED (still live, succeeded, or dead-lettered)."""

    def __init__(self, task_id: str, state: str, message: str = "") -> None:
        hint = ": replay its DLQ entry instead" if state == "DEAD_LETTERED" else ""
        super().__init__(message or f"task {task_id} is {state}, not FAILED{hint}")
        self.task_id = task_id
        self.state = state


class InvalidOperation(DtqError):
    """Raised when an operator action's arguments are invalid (bad queue name, bad filter)."""


class OperationInProgress(RetryableError):
    """Raised when another attempt holds an idempotent operation's key; retry after `delay`."""

    def __init__(self, key: str, delay: float) -> None:
        super().__init__(f"idempotent operation {key!r} is running elsewhere", delay=delay)
        self.key = key


class AuditUnavailable(DtqError):
    """Raised when an action's audit row cannot be written, so the action does not start."""


class ReadBudgetExceeded(DtqError):
    """Raised when a read would send more Redis commands than DTQ['READ_BUDGET'] allows."""

    def __init__(self, limit: int, needed: int) -> None:
        super().__init__(
            f"this read needs {needed} Redis commands, more than the read budget of {limit} "
            "(DTQ['READ_BUDGET']); narrow it: a queue, a state, a smaller limit"
        )
        self.limit = limit
        self.needed = needed


class UnknownQueue(InvalidTaskError):
    """Raised when a queue is not declared (DTQ['QUEUES']) or not accepted by its task."""

    def __init__(
        self, queue: str, allowed: list[str], by: str = "declared (DTQ['QUEUES'])"
    ) -> None:
        names = ", ".join(allowed) or "(none)"
        super().__init__(f"queue {queue!r} is not {by}; allowed: {names}")
        self.queue = queue
        self.allowed = allowed
