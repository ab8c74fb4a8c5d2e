"""System checks for the DTQ settings (dtq.E0xx errors, dtq.W0xx warnings)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from redis.exceptions import RedisError

from dtq.conf import DEFAULTS, IDEMPOTENCY_SCOPES, dtq_settings
from dtq.engine.connection import redact
from dtq.engine.errors import ConfigurationError
from dtq.engine.keys import QUEUE_NAME

POSITIVE_NUMBERS = (
    "SOCKET_TIMEOUT",
    "SOCKET_CONNECT_TIMEOUT",
    "BLOCK_TIMEOUT",
    "VISIBILITY_TIMEOUT",
    "HEARTBEAT_INTERVAL",
    "RETRY_BASE",
    "RETRY_CAP",
    "RESULT_TTL",
    "RETENTION",
    "DLQ_RETENTION",
    "EVENT_STREAM_MAXLEN",
    "MAX_PAYLOAD_BYTES",
    "MAX_DELAY",
    "IDEMPOTENCY_TTL",
    "SCHEDULER_INTERVAL",
    "SCHEDULER_BATCH",
    "REAPER_INTERVAL",
    "REAPER_BATCH",
    "FINALIZE_BATCH",
    "WORKER_CONCURRENCY",
    "DEFAULT_MAX_ATTEMPTS",
    "API_MAX_BODY_BYTES",
    "API_PAGE_SIZE",
    "LIVE_RECHECK_INTERVAL",
    "LIVE_MAX_SOCKETS_PER_USER",
    "BULK_REQUEST_LIMIT",
)
EVICTING_POLICIES_OK = {"noeviction"}
THROTTLE_RATE = re.compile(r"^[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)$")
MIN_TOKEN_LENGTH = 16
MIN_READ_BUDGET = 100  # one queue's overview and a short page of tasks


def _error(msg: str, hint: str, n: int) -> Error:
    return Error(msg, hint=hint, id=f"dtq.E{n:03d}")


def _positive_errors() -> list[Error]:
    """Check the settings that must be positive numbers."""
    errors = []
    for name in POSITIVE_NUMBERS:
        value = getattr(dtq_settings, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            msg = f"DTQ['{name}'] must be a positive number, got {value!r}"
            errors.append(_error(msg, f"Remove it to use the default ({DEFAULTS[name]}).", 2))
    return errors


def _name_ok(value: Any) -> bool:
    return isinstance(value, str) and bool(QUEUE_NAME.fullmatch(value))


def _setting_errors() -> list[Error]:
    """Check the connection, naming and module settings."""
    s = dtq_settings
    problems = [
        (
            not isinstance(s.REDIS_URL, str)
            or not s.REDIS_URL.startswith(("redis://", "rediss://", "unix://")),
            f"DTQ['REDIS_URL'] is not a Redis URL: {redact(repr(s.REDIS_URL))}",
            "Use redis://host:port/db, rediss://... or unix:///path.",
            3,
        ),
        (
            not _name_ok(s.KEY_PREFIX),
            f"DTQ['KEY_PREFIX'] is invalid: {s.KEY_PREFIX!r}",
            "Use letters, digits, '_', '.' or '-' (no ':' or braces).",
            4,
        ),
        (
            s.SHARDS != 1,
            "DTQ['SHARDS'] must be 1 in this version",
            "Keys and ids carry a shard, but workers read one shard only.",
            5,
        ),
        (
            not isinstance(s.TASK_MODULES, (list, tuple))
            or not all(isinstance(m, str) for m in s.TASK_MODULES),
            "DTQ['TASK_MODULES'] must be a list of module paths",
            "For example ['myproject.jobs'].",
            6,
        ),
        (
            not _name_ok(s.DEFAULT_QUEUE),
            f"DTQ['DEFAULT_QUEUE'] is invalid: {s.DEFAULT_QUEUE!r}",
            "Use 1-64 letters, digits, '_', '.' or '-'.",
            7,
        ),
    ]
    return _positive_errors() + [_error(m, h, n) for bad, m, h, n in problems if bad]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _limit_errors() -> list[Error]:
    """Check the optional and non-negative settings that _setting_errors does not cover."""
    s = dtq_settings
    errors = [
        _error(
            f"DTQ['{name}'] must be None or a positive number, got {value!r}",
            "Remove it to use the default.",
            10,
        )
        for name in ("DEFAULT_TIMEOUT", "LEASE_TIMEOUT")
        if (value := getattr(s, name)) is not None and (not _is_number(value) or value <= 0)
    ]
    depths = s.QUEUE_MAX_DEPTH
    problems = [
        (
            not _is_number(s.RETRY_JITTER) or not 0 <= s.RETRY_JITTER <= 1,
            f"DTQ['RETRY_JITTER'] must be between 0 and 1, got {s.RETRY_JITTER!r}",
            "0 disables jitter; 0.5 spreads delays by +/-50%.",
            11,
        ),
        (
            not _is_number(s.FINALIZE_FLUSH_MS) or s.FINALIZE_FLUSH_MS < 0,
            f"DTQ['FINALIZE_FLUSH_MS'] must be >= 0, got {s.FINALIZE_FLUSH_MS!r}",
            "0 flushes every outcome at once.",
            12,
        ),
        (
            not isinstance(s.MAX_QUEUE_DEPTH, int) or s.MAX_QUEUE_DEPTH < 0,
            f"DTQ['MAX_QUEUE_DEPTH'] must be a whole number >= 0, got {s.MAX_QUEUE_DEPTH!r}",
            "0 means unlimited.",
            13,
        ),
        (
            not isinstance(depths, dict)
            or not all(
                isinstance(q, str) and QUEUE_NAME.fullmatch(q) and isinstance(n, int) and n >= 0
                for q, n in depths.items()
            ),
            "DTQ['QUEUE_MAX_DEPTH'] must map queue names to whole numbers >= 0",
            "For example {'emails': 10000}.",
            14,
        ),
        (
            not isinstance(s.READ_BUDGET, int)
            or isinstance(s.READ_BUDGET, bool)
            or s.READ_BUDGET < MIN_READ_BUDGET,
            f"DTQ['READ_BUDGET'] must be a whole number >= {MIN_READ_BUDGET}, "
            f"got {s.READ_BUDGET!r}",
            "It bounds the Redis commands of one read request; the default is 1000.",
            15,
        ),
    ]
    return errors + [_error(m, h, n) for bad, m, h, n in problems if bad]


def _queue_errors() -> list[CheckMessage]:
    """Check DTQ['QUEUES'] and that every registered task's queues are declared in it."""
    s = dtq_settings
    queues = s.QUEUES
    if queues is None:
        return []
    if not isinstance(queues, (list, tuple)) or not all(_name_ok(q) for q in queues):
        msg = f"DTQ['QUEUES'] must be None or a list of queue names, got {queues!r}"
        return [_error(msg, "For example ['default', 'emails'].", 16)]
    if s.DEFAULT_QUEUE not in queues:
        msg = f"DTQ['QUEUES'] does not declare DTQ['DEFAULT_QUEUE'] ({s.DEFAULT_QUEUE!r})"
        return [_error(msg, "Tasks that name no queue would be refused: add it.", 17)]
    from dtq.engine import registry
    from dtq.engine.declared import task_queues

    return [
        Warning(
            f"task {task.name!r} names queue {queue!r}, which DTQ['QUEUES'] does not declare",
            hint="Its submissions to that queue are refused: declare the queue or drop it.",
            id="dtq.W005",
        )
        for task in registry.tasks()
        for queue in task_queues(task)
        if queue not in queues
    ]


def _timing_errors() -> list[Error]:
    s = dtq_settings
    errors = []
    try:
        if float(s.BLOCK_TIMEOUT) >= float(s.SOCKET_TIMEOUT):
            errors.append(
                _error(
                    "DTQ['BLOCK_TIMEOUT'] must be shorter than DTQ['SOCKET_TIMEOUT']",
                    "A blocking read longer than the socket timeout fails with a timeout error.",
                    8,
                )
            )
        if s.lease_timeout <= float(s.HEARTBEAT_INTERVAL) * 2:
            errors.append(
                _error(
                    "DTQ['LEASE_TIMEOUT'] must be more than twice DTQ['HEARTBEAT_INTERVAL']",
                    "Otherwise one late heartbeat lets the reaper take a live worker's task.",
                    9,
                )
            )
    except (TypeError, ValueError):
        pass  # reported by _setting_errors
    return errors


def _api_errors() -> list[Error]:
    s = dtq_settings
    errors = []
    token = s.METRICS_TOKEN
    if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH):
        errors.append(
            _error(
                f"DTQ['METRICS_TOKEN'] must be None or a string of at least {MIN_TOKEN_LENGTH} "
                "characters",
                "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe())'",
                20,
            )
        )
    for name, n in (("API_SUBMIT_THROTTLE", 21), ("API_READ_THROTTLE", 22)):
        rate = getattr(s, name)
        if rate is not None and not (isinstance(rate, str) and THROTTLE_RATE.match(rate)):
            errors.append(
                _error(
                    f"DTQ['{name}'] is not a rate: {rate!r}",
                    "Use None (no throttle) or '<number>/<second|minute|hour|day>', "
                    "e.g. '100/minute'.",
                    n,
                )
            )
    scope = s.API_IDEMPOTENCY_SCOPE
    if scope not in IDEMPOTENCY_SCOPES:
        errors.append(
            _error(
                f"DTQ['API_IDEMPOTENCY_SCOPE'] must be 'user' or 'queue', got {scope!r}",
                "'user' (the default) keeps each API user's idempotency keys apart.",
                23,
            )
        )
    return errors


def _is_address(value: Any) -> bool:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return False
    host, port = value
    return bool(host) and isinstance(host, str) and isinstance(port, int) and 0 < port < 65536


def _url_db(url: Any) -> int:
    try:
        return int(urlsplit(str(url)).path.strip("/") or 0)
    except ValueError:
        return -1


def _topology_errors() -> list[Error]:
    """Check the Cluster, Sentinel and durable-submit settings (docs/scaling.md)."""
    s = dtq_settings
    sentinels, service, replicas = s.REDIS_SENTINELS, s.REDIS_SENTINEL_SERVICE, s.SUBMIT_REPLICAS
    found = sentinels is not None or s.REDIS_CLUSTER
    problems = [
        (
            not isinstance(s.REDIS_CLUSTER, bool),
            f"DTQ['REDIS_CLUSTER'] must be True or False, got {s.REDIS_CLUSTER!r}",
            "True when DTQ['REDIS_URL'] names a node of a Redis Cluster.",
            30,
        ),
        (
            sentinels is not None
            and (
                not isinstance(sentinels, (list, tuple))
                or not sentinels
                or not all(_is_address(a) for a in sentinels)
            ),
            f"DTQ['REDIS_SENTINELS'] must be a list of (host, port) pairs, got {sentinels!r}",
            "For example [('10.0.0.1', 26379), ('10.0.0.2', 26379), ('10.0.0.3', 26379)].",
            31,
        ),
        (
            (sentinels is not None) != (isinstance(service, str) and bool(service)),
            "DTQ['REDIS_SENTINELS'] and DTQ['REDIS_SENTINEL_SERVICE'] go together, got "
            f"{sentinels!r} and {service!r}",
            "Name the Sentinels and the service (their 'master name'), or neither.",
            32,
        ),
        (
            sentinels is not None and s.REDIS_CLUSTER is True,
            "DTQ['REDIS_CLUSTER'] and DTQ['REDIS_SENTINELS'] cannot both be set",
            "A Redis Cluster fails over by itself: set REDIS_CLUSTER and drop the Sentinels.",
            33,
        ),
        (
            s.REDIS_CLUSTER is True and _url_db(redis_url_setting()) != 0,
            "a Redis Cluster has database 0 only, but DTQ['REDIS_URL'] names another",
            "Drop the /<db> part of the URL (or use /0).",
            34,
        ),
        (
            bool(found) and not str(redis_url_setting()).startswith("redis://"),
            "with DTQ['REDIS_CLUSTER'] or DTQ['REDIS_SENTINELS'], DTQ['REDIS_URL'] must be a "
            f"redis:// URL, got {redact(repr(redis_url_setting()))}",
            "TLS (rediss://) and unix sockets are not supported with Cluster or Sentinel yet.",
            35,
        ),
        (
            not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0,
            f"DTQ['SUBMIT_REPLICAS'] must be a whole number >= 0, got {replicas!r}",
            "0 (the default) returns once the primary has the task; 1 waits for one replica.",
            36,
        ),
        (
            not _is_number(s.SUBMIT_REPLICAS_TIMEOUT) or s.SUBMIT_REPLICAS_TIMEOUT <= 0,
            "DTQ['SUBMIT_REPLICAS_TIMEOUT'] must be a positive number of seconds, got "
            f"{s.SUBMIT_REPLICAS_TIMEOUT!r}",
            "For example 1.0.",
            37,
        ),
    ]
    return [_error(m, h, n) for bad, m, h, n in problems if bad]


def redis_url_setting() -> Any:
    """Return the configured Redis URL (REDIS_URL or the REDIS_CACHE's), never raising."""
    from dtq.engine.connection import redis_url

    try:
        return redis_url()
    except Exception:  # a broken REDIS_CACHE is reported by its own check
        return dtq_settings.REDIS_URL


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate the DTQ settings dict."""
    try:
        dtq_settings.reload()
        dtq_settings.KEY_PREFIX  # noqa: B018  (forces the load, which validates the keys)
    except ConfigurationError as exc:
        return [_error(str(exc), "See docs/configuration.md for the accepted keys.", 1)]
    errors: list[CheckMessage] = [
        *_setting_errors(),
        *_limit_errors(),
        *_api_errors(),
        *_topology_errors(),
    ]
    return [*errors, *_queue_errors()] if errors else [*_queue_errors(), *_timing_errors()]


LARGE_PAYLOAD = 1024 * 1024  # above this per task, a few thousand tasks fill gigabytes


def _reads_unthrottled() -> bool:
    from dtq.api.access import ReadThrottle  # DRF is installed: the caller checked

    return ReadThrottle().get_rate() is None


def _unlimited_warnings() -> list[Warning]:
    """Return a warning per setting that leaves Redis' memory or load without a limit."""
    s = dtq_settings
    zero = sorted(q for q, n in (s.QUEUE_MAX_DEPTH or {}).items() if n == 0)
    where = f"queues {', '.join(zero)}" if zero else "every queue"
    api = apps.is_installed("rest_framework")
    problems = [
        (
            s.MAX_QUEUE_DEPTH == 0 or bool(zero),
            f"no depth limit for {where} (MAX_QUEUE_DEPTH / QUEUE_MAX_DEPTH 0)",
            "A backlog can fill Redis, and a full Redis refuses the workers' writes too. "
            "Set a limit (see docs/sizing.md).",
            10,
        ),
        (
            _is_number(s.MAX_PAYLOAD_BYTES) and s.MAX_PAYLOAD_BYTES > LARGE_PAYLOAD,
            f"DTQ['MAX_PAYLOAD_BYTES'] is {s.MAX_PAYLOAD_BYTES} (over 1 MiB)",
            "Keep large data outside Redis and pass a reference in the arguments.",
            11,
        ),
        (
            api and s.API_SUBMIT_THROTTLE is None,
            "DTQ['API_SUBMIT_THROTTLE'] is not set: API submissions are not throttled",
            "For example '100/minute'.",
            12,
        ),
        (
            api and _reads_unthrottled(),
            "DTQ['API_READ_THROTTLE'] is not set: API reads are not throttled",
            "For example '600/minute' (DRF scope dtq_read).",
            13,
        ),
    ]
    return [Warning(m, hint=h, id=f"dtq.W{n:03d}") for bad, m, h, n in problems if bad]


@register(Tags.security, deploy=True)
def check_deploy(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn (check --deploy) about unlimited storage and load, and Redis that may evict."""
    try:
        dtq_settings.reload()
        warnings = _unlimited_warnings()
    except (ConfigurationError, TypeError, AttributeError):
        return []  # check_settings reports the settings themselves
    return warnings + _redis_checks()


@register(Tags.database, deploy=False)
def check_redis(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """Warn when Redis is unreachable, too old, or may evict queue data."""
    if databases is None:
        return []  # only with --database, like Django's own database checks
    return _redis_checks()


def _redis_checks() -> list[Warning]:
    from dtq.engine.connection import get_client

    try:
        client = get_client()
        info = client.info("server")
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
    except (RedisError, ConfigurationError) as exc:
        return [
            Warning(
                f"Redis is not reachable: {redact(str(exc))}",
                id="dtq.W001",
                hint="Check DTQ['REDIS_URL'].",
            )
        ]
    except Exception as exc:  # CONFIG may be disabled on managed Redis
        return [Warning(f"could not read Redis settings: {exc}", id="dtq.W003")]
    return redis_warnings(info.get("redis_version", "0"), policy or "noeviction")


def redis_warnings(version: str, policy: str) -> list[Warning]:
    """Return warnings for a Redis version and maxmemory-policy."""
    warnings = []
    if tuple(int(p) for p in version.split(".")[:2]) < (6, 2):
        warnings.append(
            Warning(
                f"Redis {version} is older than 6.2 (no XAUTOCLAIM)",
                id="dtq.W004",
                hint="Upgrade Redis to 6.2 or newer.",
            )
        )
    if policy not in EVICTING_POLICIES_OK:
        warnings.append(
            Warning(
                f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may silently "
                "delete queued tasks",
                id="dtq.W002",
                hint="Set maxmemory-policy noeviction.",
            )
        )
    return warnings
