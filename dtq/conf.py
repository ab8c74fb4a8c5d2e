"""The DTQ settings: one typed dataclass with defaults and the rule of every value.

`Settings` is the one place that says what a setting is: its type, its default and what it
must be (its `Rule`). `problems()` checks a settings.DTQ dict against it (dtq/checks.py turns
the result into system-check errors); `dtq_settings` reads settings.DTQ on first use, validated
and converted to the field types, and again after a setting_changed signal.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from dtq.engine.errors import ConfigurationError
from dtq.engine.keys import QUEUE_NAME

IDEMPOTENCY_SCOPES = ("user", "queue")  # the values of API_IDEMPOTENCY_SCOPE
THROTTLE_RATE = re.compile(r"^[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)$")
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
MIN_TOKEN_LENGTH = 16
MIN_READ_BUDGET = 100  # one queue's overview and a short page of tasks
TYPE_ERROR_ID = 18  # dtq.E018: a setting without a check of its own has the wrong type


class BadValue(ValueError):
    """A setting's value breaks its rule (the message is what was expected)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What a setting's value must be: a converter that raises BadValue, its check id, a hint."""

    convert: Callable[[Any], Any]
    check_id: int = TYPE_ERROR_ID
    hint: str = ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(
    minimum: float = 0,
    *,
    above: bool = True,
    maximum: float | None = None,
    whole: bool = False,
    optional: bool = False,
    check_id: int = 2,
    hint: str = "",
) -> Rule:
    """Return the rule of a number: whole (int) or not (float), > or >= minimum, <= maximum."""
    kind = "a whole number" if whole else "a number"
    if maximum is not None:
        expected = f"between {minimum:g} and {maximum:g}"
    elif minimum == 0 and above:
        expected = "a positive whole number" if whole else "a positive number"
    else:
        expected = f"{kind} {'>' if above else '>='} {minimum:g}"
    if optional:
        expected = f"None or {expected}"

    def convert(value: Any) -> Any:
        if value is None and optional:
            return None
        ok = _is_number(value) and (value > minimum if above else value >= minimum)
        ok = ok and (maximum is None or value <= maximum)
        if isinstance(value, float):  # 3600.0 is as good as 3600; nan and inf are not numbers
            ok = ok and math.isfinite(value) and (value.is_integer() or not whole)
        elif ok:
            ok = abs(value) < (2**63 if whole else 2**53)  # what Redis and a float hold
        if not ok:
            raise BadValue(expected)
        return int(value) if whole else float(value)

    return Rule(convert, check_id, hint)


def text(
    test: Callable[[str], bool],
    expected: str,
    *,
    optional: bool = False,
    check_id: int = TYPE_ERROR_ID,
    hint: str = "",
) -> Rule:
    """Return the rule of a string that passes test (or None when optional)."""
    expected = f"None or {expected}" if optional else expected

    def convert(value: Any) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not test(value):
            raise BadValue(expected)
        return value

    return Rule(convert, check_id, hint)


def _any(value: str) -> bool:
    return True


def _is_name(value: str) -> bool:
    return bool(QUEUE_NAME.fullmatch(value))


def _is_rate(value: str) -> bool:
    return bool(THROTTLE_RATE.match(value))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadValue("True or False")
    return value


def _module_paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, str) for m in value):
        raise BadValue("a list of module paths")
    return tuple(value)


def _queue_names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(q, str) and _is_name(q) for q in value
    ):
        raise BadValue("None or a list of queue names")
    return tuple(value)


def _depths(value: Any) -> dict[str, int]:
    if (
        not isinstance(value, Mapping)
        or not all(
            isinstance(q, str) and _is_name(q) and isinstance(n, int) and not isinstance(n, bool)
            for q, n in value.items()
        )
        or any(n < 0 for n in value.values())
    ):
        raise BadValue("a dict of queue names to whole numbers >= 0")
    return dict(value)


MAX_SHARDS = 1024  # a task id carries its shard in 10 bits (dtq.engine.ids)


def _shard_count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SHARDS:
        raise BadValue(f"a whole number from 1 to {MAX_SHARDS}")
    return value


def _addresses(value: Any) -> tuple[tuple[str, int], ...] | None:
    """Convert REDIS_SENTINELS: None, or (host, port) pairs (lists too: JSON has no tuples)."""
    if value is None:
        return None

    def address(pair: Any) -> bool:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return False
        host, port = pair
        ok_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
        return isinstance(host, str) and bool(host) and ok_port

    if not isinstance(value, (list, tuple)) or not value or not all(map(address, value)):
        raise BadValue("None or a non-empty list of (host, port) pairs")
    return tuple((str(host), int(port)) for host, port in value)


NAME_HINT = "Use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit."
RATE_HINT = "Use None (no throttle) or '<number>/<second|minute|hour|day>', e.g. '100/minute'."


def setting(default: Any, rule: Rule) -> Any:
    """Declare one Settings field: its default and its rule."""
    return field(default=default, metadata={"rule": rule})


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every DTQ setting with its type and default (docs/configuration.md describes each)."""

    # Connection
    REDIS_URL: str = setting(
        "redis://127.0.0.1:6379/0",
        text(
            lambda v: v.startswith(REDIS_SCHEMES),
            "a Redis URL",
            check_id=3,
            hint="Use redis://host:port/db, rediss://... or unix:///path.",
        ),
    )
    # alias of a django-redis cache whose connection dtq should share
    REDIS_CACHE: str | None = setting(None, text(_any, "a cache alias", optional=True))
    KEY_PREFIX: str = setting(
        "dtq",
        text(
            _is_name,
            "a key prefix",
            check_id=4,
            hint="Use letters, digits, '_', '.' or '-' (no ':' or braces).",
        ),
    )
    SHARDS: int = setting(
        1, Rule(_shard_count, 5, "1 on one server; on a Redis Cluster up to a few per primary.")
    )
    # REDIS_URL names any node of a Redis Cluster (docs/scaling.md)
    REDIS_CLUSTER: bool = setting(
        False, Rule(_flag, 30, "True when DTQ['REDIS_URL'] names a node of a Redis Cluster.")
    )
    # [(host, port), ...]: follow the primary these Sentinels name
    REDIS_SENTINELS: tuple[tuple[str, int], ...] | None = setting(
        None,
        Rule(_addresses, 31, "For example [('10.0.0.1', 26379), ('10.0.0.2', 26379)]."),
    )
    # the Sentinels' name of the primary (their "master name")
    REDIS_SENTINEL_SERVICE: str | None = setting(
        None,
        text(bool, "a service name", optional=True, check_id=32, hint="For example 'dtq'."),
    )
    SOCKET_TIMEOUT: float = setting(10.0, number())
    SOCKET_CONNECT_TIMEOUT: float = setting(5.0, number())
    BLOCK_TIMEOUT: float = setting(2.0, number())  # longest blocking read; < SOCKET_TIMEOUT
    # Delivery
    VISIBILITY_TIMEOUT: float = setting(60.0, number())  # idle seconds before the PEL backstop
    HEARTBEAT_INTERVAL: float = setting(2.0, number())
    # seconds a worker's claim lasts without renewal; None = 5 heartbeats (lease_timeout)
    LEASE_TIMEOUT: float | None = setting(None, number(optional=True, check_id=10))
    TASK_MODULES: tuple[str, ...] = setting(
        (), Rule(_module_paths, 6, "For example ['myproject.jobs'].")
    )
    DEFAULT_QUEUE: str = setting(
        "default", text(_is_name, "a queue name", check_id=7, hint=NAME_HINT)
    )
    # The queues tasks may use; None = the default queue plus every queue a task names
    QUEUES: tuple[str, ...] | None = setting(
        None, Rule(_queue_names, 16, "For example ['default', 'emails'].")
    )
    DEFAULT_MAX_ATTEMPTS: int = setting(3, number(whole=True))
    RETRY_BASE: float = setting(1.0, number())
    RETRY_CAP: float = setting(300.0, number())
    RETRY_JITTER: float = setting(
        0.5,
        number(
            0,
            above=False,
            maximum=1,
            check_id=11,
            hint="0 disables jitter; 0.5 spreads delays by +/-50%.",
        ),
    )
    DEFAULT_TIMEOUT: float | None = setting(None, number(optional=True, check_id=10))
    # Retention and limits
    RESULT_TTL: int = setting(86400, number(whole=True))
    RETENTION: int = setting(7 * 86400, number(whole=True))
    DLQ_ENABLED: bool = setting(True, Rule(_flag))
    DLQ_RETENTION: int = setting(30 * 86400, number(whole=True))
    EVENT_STREAM_MAXLEN: int = setting(10000, number(whole=True))
    MAX_PAYLOAD_BYTES: int = setting(64 * 1024, number(whole=True))  # docs/sizing.md
    MAX_DELAY: int = setting(366 * 86400, number(whole=True))
    # 0 = unlimited; counts queued, running and scheduled tasks
    MAX_QUEUE_DEPTH: int = setting(
        100_000, number(0, above=False, whole=True, check_id=13, hint="0 means unlimited.")
    )
    # per-queue overrides of MAX_QUEUE_DEPTH
    QUEUE_MAX_DEPTH: dict[str, int] = field(
        default_factory=dict, metadata={"rule": Rule(_depths, 14, "For example {'emails': 10000}.")}
    )
    IDEMPOTENCY_TTL: int = setting(86400, number(whole=True))
    # Durable submit: enqueue() and operator actions return only once this many replicas
    # have the write (WAIT; WAITAOF where the server has it), or raise NotReplicated.
    SUBMIT_REPLICAS: int = setting(
        0,
        number(
            0,
            above=False,
            whole=True,
            check_id=36,
            hint="0 (the default) returns once the primary has the task; 1 waits for a replica.",
        ),
    )
    SUBMIT_REPLICAS_TIMEOUT: float = setting(1.0, number(check_id=37, hint="For example 1.0."))
    # Processes
    SCHEDULER_INTERVAL: float = setting(0.5, number())
    SCHEDULER_BATCH: int = setting(500, number(whole=True))
    REAPER_INTERVAL: float = setting(1.0, number())
    REAPER_BATCH: int = setting(200, number(whole=True))
    FINALIZE_BATCH: int = setting(256, number(whole=True))
    FINALIZE_FLUSH_MS: float = setting(
        1.0, number(0, above=False, check_id=12, hint="0 flushes every outcome at once.")
    )
    WORKER_CONCURRENCY: int = setting(16, number(whole=True))
    PREFETCH_LIMIT: int = setting(
        32, number(0, above=False, whole=True, check_id=38, hint="0 never claims ahead.")
    )
    # REST API (dtq.api)
    # bearer token that may read /metrics and ready/ without a user
    METRICS_TOKEN: str | None = setting(
        None,
        text(
            lambda v: len(v) >= MIN_TOKEN_LENGTH,
            f"a string of at least {MIN_TOKEN_LENGTH} characters",
            optional=True,
            check_id=20,
            hint="Generate one with: python -c 'import secrets; print(secrets.token_urlsafe())'",
        ),
    )
    API_MAX_BODY_BYTES: int = setting(1024 * 1024, number(whole=True))  # 413 above, unparsed
    # DRF rate of API task submissions per user, e.g. "100/minute"
    API_SUBMIT_THROTTLE: str | None = setting(
        None, text(_is_rate, "a rate", optional=True, check_id=21, hint=RATE_HINT)
    )
    API_PAGE_SIZE: int = setting(50, number(whole=True))  # default page size (at most 1000)
    # Live events websocket (dtq.consumers)
    LIVE_RECHECK_INTERVAL: float = setting(30.0, number())  # seconds between two user checks
    LIVE_MAX_SOCKETS_PER_USER: int = setting(10, number(whole=True))  # per server process
    BULK_REQUEST_LIMIT: int = setting(2000, number(whole=True))  # per API/admin bulk request
    # "user": each user's idempotency keys are their own; "queue": shared
    API_IDEMPOTENCY_SCOPE: str = setting(
        "user",
        text(
            IDEMPOTENCY_SCOPES.__contains__,
            "'user' or 'queue'",
            check_id=23,
            hint="'user' (the default) keeps each API user's idempotency keys apart.",
        ),
    )
    # Audit log: alias for audit rows; None = dtq's own connection to "default"
    AUDIT_DATABASE: str | None = setting(None, text(_any, "a database alias", optional=True))
    # DRF rate for GETs per user (scope dtq_read), e.g. "600/minute"
    API_READ_THROTTLE: str | None = setting(
        None, text(_is_rate, "a rate", optional=True, check_id=22, hint=RATE_HINT)
    )
    # Reads (admin, API, /metrics, dtq_status): Redis commands one request's reads may send
    READ_BUDGET: int = setting(
        1000,
        number(
            MIN_READ_BUDGET,
            above=False,
            whole=True,
            check_id=15,
            hint="It bounds the Redis commands of one read request; the default is 1000.",
        ),
    )

    @property
    def lease_timeout(self) -> float:
        """Seconds a claim stays valid without a heartbeat renewing it."""
        lease = self.LEASE_TIMEOUT
        return lease if lease else max(5.0 * self.HEARTBEAT_INTERVAL, 3.0)

    def max_depth(self, queue: str) -> int:
        """Return the depth limit of a queue (0 = unlimited)."""
        return self.QUEUE_MAX_DEPTH.get(queue, self.MAX_QUEUE_DEPTH)


NAMES = tuple(f.name for f in fields(Settings))
RULES: dict[str, Rule] = {f.name: f.metadata["rule"] for f in fields(Settings)}


def default(name: str) -> Any:
    """Return a setting's default value."""
    found = next(f for f in fields(Settings) if f.name == name)
    if found.default is MISSING and found.default_factory is not MISSING:
        return found.default_factory()
    return found.default


DEFAULTS: dict[str, Any] = {name: default(name) for name in NAMES}


@dataclass(frozen=True, slots=True)
class Problem:
    """One setting whose value breaks its rule."""

    name: str
    message: str
    hint: str
    check_id: int


def _user_settings() -> Any:
    return getattr(django_settings, "DTQ", {}) or {}


def problems(user: Any) -> list[Problem]:
    """Return what is wrong with a settings.DTQ value, one Problem per setting."""
    if not isinstance(user, Mapping):
        return [Problem("", f"settings.DTQ must be a dict, got {type(user).__name__}", "", 1)]
    unknown = sorted(set(user) - set(NAMES))
    if unknown:
        hint = "See docs/configuration.md for the accepted keys."
        return [Problem("", f"unknown DTQ setting(s): {', '.join(unknown)}", hint, 1)]
    found = []
    for name, value in user.items():
        rule = RULES[name]
        try:
            rule.convert(value)
        except BadValue as exc:
            # A URL may hold a password: say what it lacks instead of showing it.
            secret = name == "REDIS_URL" and isinstance(value, str)
            shown = "a URL of another scheme" if secret else repr(value)
            message = f"DTQ['{name}'] must be {exc}, got {shown}"
            hint = rule.hint or f"Remove it to use the default ({DEFAULTS[name]!r})."
            found.append(Problem(name, message, hint, rule.check_id))
    return found


def load(user: Any) -> Settings:
    """Return the Settings of a settings.DTQ dict; ConfigurationError names every bad value."""
    bad = problems(user)
    if bad:
        raise ConfigurationError("; ".join(p.message for p in bad))
    return Settings(**{name: RULES[name].convert(value) for name, value in user.items()})


class DtqSettings(Settings):
    """The project's Settings: read from settings.DTQ at first use, again after reload().

    The fields are Settings' slots, left empty until first read: an empty slot raises
    AttributeError, which lands in __getattr__, which fills them all. A filled slot reads as
    fast as any attribute.
    """

    def __init__(self) -> None:
        pass  # nothing read yet: Django's settings may not be configured at import time

    if not TYPE_CHECKING:  # mypy should see the typed fields only, not a catch-all

        def __getattr__(self, name: str) -> object:
            if name not in NAMES:
                raise AttributeError(f"no DTQ setting {name!r}")
            current = load(_user_settings())
            for each in NAMES:
                object.__setattr__(self, each, getattr(current, each))
            return getattr(current, name)

    def reload(self) -> None:
        """Forget the values read so the next read sees the current settings.DTQ."""
        for name in NAMES:
            with contextlib.suppress(AttributeError):  # not read yet
                object.__delattr__(self, name)

    def __repr__(self) -> str:
        return "<DtqSettings>"  # the dataclass repr would read (and maybe fail) every value


dtq_settings = DtqSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "DTQ":
        dtq_settings.reload()
