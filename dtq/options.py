"""Task options: one definition, one check and one message per option, for every entry point.

`DeliveryOptions` holds dtq's options beyond django.tasks' own (queue_name, priority,
run_after); `dtq.Task` and `DtqTask` both inherit it. `TaskOptions` is every option of one
submission, checked when made: the decorators, using(), the django.tasks backends, the API's
serializers, run-by-hand and the engine's submit.validate all use the `check_*` functions here,
so one bad value gets the same `InvalidOption` message wherever it comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from dtq.conf import dtq_settings
from dtq.engine.errors import InvalidTaskError, SubmitError
from dtq.engine.keys import check_queue_name
from dtq.engine.limits import TaskLimits, check_concurrency, parse_rate

IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_ATTEMPTS = 1000  # attempts of one task at most
MAX_SECONDS = 10 * 366 * 86400  # timeouts, TTLs and retry delays beyond ten years are mistakes


class InvalidOption(InvalidTaskError, SubmitError):
    """A task option's value is refused (before anything is written); `option` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_queue(value: Any) -> str | None:
    """Return a queue name (None: the default queue), or raise InvalidOption."""
    if value is None:
        return None
    try:
        return check_queue_name(value)
    except ValueError as exc:
        raise InvalidOption("queue_name", str(exc)) from None


def check_priority(value: Any, option: str = "priority") -> int:
    """Return a priority in MIN_PRIORITY..MAX_PRIORITY, or raise InvalidOption."""
    if not isinstance(value, int) or isinstance(value, bool):
        ok = False
    else:
        ok = MIN_PRIORITY <= value <= MAX_PRIORITY
    if not ok:
        # Django's words first (django.tasks code and its tests match them), then the value.
        limits = f"between {MIN_PRIORITY} and {MAX_PRIORITY}"
        raise InvalidOption(option, f"{option} must be a whole number {limits}. Got {value!r}.")
    return int(value)


def check_max_attempts(value: Any) -> int | None:
    """Return a number of attempts in 1..MAX_ATTEMPTS (None: the default), or raise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        message = f"max_attempts must be a whole number in 1..{MAX_ATTEMPTS}, got {value!r}"
        raise InvalidOption("max_attempts", message)
    return value


def check_seconds(option: str, value: Any) -> float | None:
    """Return a positive number of seconds up to MAX_SECONDS (None: the default), or raise."""
    if value is None:
        return None
    if not _is_number(value) or not 0 < value <= MAX_SECONDS:
        message = (
            f"{option} must be a positive number of seconds (at most {MAX_SECONDS}), got {value!r}"
        )
        raise InvalidOption(option, message)
    return float(value)


def check_jitter(value: Any) -> float | None:
    """Return a retry jitter in 0..1 (None: the default), or raise InvalidOption."""
    if value is None:
        return None
    if not _is_number(value) or not 0 <= value <= 1:
        raise InvalidOption("retry_jitter", f"retry_jitter must be a number in 0..1, got {value!r}")
    return float(value)


def check_retry_on(value: Any) -> tuple[type[BaseException], ...]:
    """Return the exception classes a task retries on, or raise InvalidOption."""
    classes = value if isinstance(value, tuple) else (value,)
    if not classes or not all(
        isinstance(c, type) and issubclass(c, BaseException) for c in classes
    ):
        message = f"retry_on must be a tuple of exception classes, got {value!r}"
        raise InvalidOption("retry_on", message)
    return classes


def naive_message(option: str, value: datetime) -> str:
    """Return the one message that refuses a naive datetime (dtq never guesses a time zone)."""
    # Django's words first (django.tasks code and its tests match them), then what to do.
    return (
        f"{option} must be an aware datetime. Got the naive {value.isoformat()}: dtq does not "
        "guess a time zone (give it a tzinfo, or pass a timedelta)."
    )


def check_run_after(value: Any) -> datetime | timedelta | None:
    """Return an aware datetime or a timedelta (None: now); a naive datetime is refused."""
    if value is None or isinstance(value, timedelta):
        return value
    if not isinstance(value, datetime):
        message = f"run_after must be an aware datetime or a timedelta, got {value!r}"
        raise InvalidOption("run_after", message)
    if timezone.is_naive(value):
        raise InvalidOption("run_after", naive_message("run_after", value))
    return value


def check_delay(seconds: Any, option: str = "delay") -> float:
    """Return a delay in 0..MAX_DELAY seconds, or raise InvalidOption naming `option`."""
    limit = dtq_settings.MAX_DELAY
    if not _is_number(seconds) or not 0 <= seconds <= limit:
        shown = f"{seconds:.3f}" if _is_number(seconds) else repr(seconds)
        message = f"{option} must be within 0..{limit} seconds from now, got {shown}"
        raise InvalidOption(option, message)
    return float(seconds)


def delay_of(run_after: datetime | timedelta | None) -> float:
    """Return the seconds from now until run_after (0 for None or the past), within MAX_DELAY."""
    run_after = check_run_after(run_after)
    if run_after is None:
        return 0.0
    if isinstance(run_after, timedelta):
        seconds = run_after.total_seconds()
    else:
        seconds = (run_after - datetime.now(UTC)).total_seconds()  # aware, whatever USE_TZ
    return check_delay(max(seconds, 0.0), "run_after")


def check_idempotency_key(value: Any) -> str | None:
    """Return an idempotency key (None: none), or raise InvalidOption."""
    if value is None:
        return None
    if not isinstance(value, str) or not IDEMPOTENCY_KEY.fullmatch(value):
        message = (
            "idempotency_key must be 1-200 characters of letters, digits and _ . : @ / + = -, "
            f"got {value!r}"
        )
        raise InvalidOption("idempotency_key", message)
    return value


def check_limits(
    rate_limit: Any = None,
    rate_burst: Any = None,
    max_concurrency: Any = None,
    concurrency_key: Any = None,
) -> TaskLimits | None:
    """Return the flow-control limits of these options (None: none), or raise InvalidOption."""
    try:
        rate = None if rate_limit is None else parse_rate(rate_limit)
    except ValueError as exc:
        raise InvalidOption("rate_limit", f"rate_limit: {exc}") from None
    if rate_burst is not None:
        if rate is None:
            raise InvalidOption("rate_burst", f"rate_burst needs rate_limit, got {rate_burst!r}")
        try:
            rate = parse_rate(rate_limit, rate_burst)
        except ValueError as exc:
            raise InvalidOption("rate_burst", f"rate_burst: {exc}") from None
    try:
        conc = None if max_concurrency is None else check_concurrency(max_concurrency)
    except ValueError as exc:
        raise InvalidOption("max_concurrency", str(exc)) from None
    if concurrency_key is not None:
        if not isinstance(concurrency_key, str) or not concurrency_key.isidentifier():
            message = f"concurrency_key must name an argument, got {concurrency_key!r}"
            raise InvalidOption("concurrency_key", message)
        if rate is None and conc is None:
            message = f"concurrency_key {concurrency_key!r} needs max_concurrency or rate_limit"
            raise InvalidOption("concurrency_key", message)
    if rate is None and conc is None:
        return None
    return TaskLimits(conc, rate, concurrency_key)


@dataclass(frozen=True, kw_only=True)
class DeliveryOptions:
    """dtq's options beyond django.tasks' own, shared by dtq.Task and DtqTask (None: DTQ's)."""

    max_attempts: int | None = None
    retry_base: float | None = None
    retry_cap: float | None = None
    retry_jitter: float | None = None
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout: float | None = None
    ttl: float | None = None
    idempotency_key: str | None = None
    # Flow control (docs/flow-control.md), enforced fleet-wide by the claim.
    rate_limit: str | None = None
    rate_burst: int | None = None
    max_concurrency: int | None = None
    concurrency_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class TaskOptions(DeliveryOptions):
    """Every option of one submission, checked when made (InvalidOption names a bad one)."""

    queue_name: str | None = None
    priority: int = 0
    run_after: datetime | timedelta | None = None

    def __post_init__(self) -> None:
        check_queue(self.queue_name)
        check_priority(self.priority)
        check_run_after(self.run_after)
        check_max_attempts(self.max_attempts)
        for option in ("retry_base", "retry_cap", "timeout", "ttl"):
            check_seconds(option, getattr(self, option))
        check_jitter(self.retry_jitter)
        check_retry_on(self.retry_on)
        check_idempotency_key(self.idempotency_key)
        self.limits()

    def limits(self) -> TaskLimits | None:
        """Return the flow-control limits these options declare (None: none)."""
        return check_limits(
            self.rate_limit, self.rate_burst, self.max_concurrency, self.concurrency_key
        )

    @classmethod
    def of(cls, task: Any, **changes: Any) -> TaskOptions:
        """Return (and so check) the options a task carries, with `changes` applied."""
        values = {f.name: getattr(task, f.name) for f in fields(cls) if hasattr(task, f.name)}
        return cls(**{**values, **changes})

    def retry(self) -> dict[str, float]:
        """Return the retry policy of a submission: these options, else DTQ's settings."""
        s = dtq_settings
        return {
            "base": s.RETRY_BASE if self.retry_base is None else self.retry_base,
            "cap": s.RETRY_CAP if self.retry_cap is None else self.retry_cap,
            "jitter": s.RETRY_JITTER if self.retry_jitter is None else self.retry_jitter,
        }


DELIVERY_OPTIONS = frozenset(f.name for f in fields(DeliveryOptions))
# What using() may change on either kind of task (retry_on is fixed where a task is defined).
USING_OPTIONS = frozenset(f.name for f in fields(TaskOptions)) - {"retry_on"}
