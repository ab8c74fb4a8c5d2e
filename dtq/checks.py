"""System checks for the DTQ settings (dtq.E0xx errors, dtq.W0xx warnings)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.apps import apps
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from redis.exceptions import RedisError

from dtq.conf import Settings, dtq_settings, problems
from dtq.engine.connection import redact
from dtq.engine.errors import ConfigurationError

EVICTING_POLICIES_OK = {"noeviction"}


def _error(msg: str, hint: str, n: int) -> Error:
    return Error(msg, hint=hint, id=f"dtq.E{n:03d}")


def _queue_errors(s: Settings) -> list[CheckMessage]:
    """Check that DTQ['QUEUES'] declares the default queue and every registered task's queues."""
    queues = s.QUEUES
    if queues is None:
        return []
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


def _timing_errors(s: Settings) -> list[Error]:
    """Check the settings whose values must agree with each other."""
    errors = []
    if s.BLOCK_TIMEOUT >= s.SOCKET_TIMEOUT:
        errors.append(
            _error(
                "DTQ['BLOCK_TIMEOUT'] must be shorter than DTQ['SOCKET_TIMEOUT']",
                "A blocking read longer than the socket timeout fails with a timeout error.",
                8,
            )
        )
    if s.lease_timeout <= s.HEARTBEAT_INTERVAL * 2:
        errors.append(
            _error(
                "DTQ['LEASE_TIMEOUT'] must be more than twice DTQ['HEARTBEAT_INTERVAL']",
                "Otherwise one late heartbeat lets the reaper take a live worker's task.",
                9,
            )
        )
    return errors


def _url_db(url: str) -> int:
    try:
        return int(urlsplit(url).path.strip("/") or 0)
    except ValueError:
        return -1


def _topology_errors(s: Settings) -> list[Error]:
    """Check that the Cluster and Sentinel settings agree with each other and the URL."""
    from dtq.engine.connection import redis_url

    try:
        url = redis_url()
    except Exception:  # a REDIS_CACHE that names no cache: not this check's business
        url = s.REDIS_URL
    sentinels = s.REDIS_SENTINELS is not None
    found = [
        (
            sentinels != (s.REDIS_SENTINEL_SERVICE is not None),
            "DTQ['REDIS_SENTINELS'] and DTQ['REDIS_SENTINEL_SERVICE'] go together",
            "Name the Sentinels and the service (their 'master name'), or neither.",
            32,
        ),
        (
            sentinels and s.REDIS_CLUSTER,
            "DTQ['REDIS_CLUSTER'] and DTQ['REDIS_SENTINELS'] cannot both be set",
            "A Redis Cluster fails over by itself: set REDIS_CLUSTER and drop the Sentinels.",
            33,
        ),
        (
            s.REDIS_CLUSTER and _url_db(url) != 0,
            "a Redis Cluster has database 0 only, but DTQ['REDIS_URL'] names another",
            "Drop the /<db> part of the URL (or use /0).",
            34,
        ),
        (
            (sentinels or s.REDIS_CLUSTER) and not url.startswith("redis://"),
            "with DTQ['REDIS_CLUSTER'] or DTQ['REDIS_SENTINELS'], DTQ['REDIS_URL'] must be a "
            f"redis:// URL, got {redact(repr(url))}",
            "TLS (rediss://) and unix sockets are not supported with Cluster or Sentinel yet.",
            35,
        ),
    ]
    return [_error(m, h, n) for bad, m, h, n in found if bad]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate the DTQ settings dict: each value by its rule (dtq.conf), then how they agree."""
    dtq_settings.reload()
    bad = problems(getattr(django_settings, "DTQ", {}) or {})
    if bad:
        return [_error(p.message, p.hint, p.check_id) for p in bad]
    return [
        *_queue_errors(dtq_settings),
        *_timing_errors(dtq_settings),
        *_topology_errors(dtq_settings),
    ]


LARGE_PAYLOAD = 1024 * 1024  # above this per task, a few thousand tasks fill gigabytes


def _reads_unthrottled() -> bool:
    from dtq.api.access import ReadThrottle  # DRF is installed: the caller checked

    return ReadThrottle().get_rate() is None


def _unlimited_warnings() -> list[Warning]:
    """Return a warning per setting that leaves Redis' memory or load without a limit."""
    s = dtq_settings
    zero = sorted(q for q, n in s.QUEUE_MAX_DEPTH.items() if n == 0)
    where = f"queues {', '.join(zero)}" if zero else "every queue"
    api = apps.is_installed("rest_framework")
    found = [
        (
            s.MAX_QUEUE_DEPTH == 0 or bool(zero),
            f"no depth limit for {where} (MAX_QUEUE_DEPTH / QUEUE_MAX_DEPTH 0)",
            "A backlog can fill Redis, and a full Redis refuses the workers' writes too. "
            "Set a limit (see docs/sizing.md).",
            10,
        ),
        (
            s.MAX_PAYLOAD_BYTES > LARGE_PAYLOAD,
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
    return [Warning(m, hint=h, id=f"dtq.W{n:03d}") for bad, m, h, n in found if bad]


@register(Tags.security, deploy=True)
def check_deploy(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn (check --deploy) about unlimited storage and load, and Redis that may evict."""
    try:
        dtq_settings.reload()
        warnings = _unlimited_warnings()
    except ConfigurationError:
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
