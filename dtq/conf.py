"""The DTQ settings dict: defaults, lazy reading, reload on setting_changed."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from dtq.engine.errors import ConfigurationError

IDEMPOTENCY_SCOPES = ("user", "queue")  # the values of API_IDEMPOTENCY_SCOPE

DEFAULTS: dict[str, Any] = {
    # Connection
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "REDIS_CACHE": None,  # alias of a django-redis cache whose connection dtq should share
    "REDIS_CLUSTER": False,  # REDIS_URL names any node of a Redis Cluster (docs/scaling.md)
    "REDIS_SENTINELS": None,  # [(host, port), ...]: follow the primary these Sentinels name
    "REDIS_SENTINEL_SERVICE": None,  # the Sentinels' name of the primary (their "master name")
    "KEY_PREFIX": "dtq",
    "SHARDS": 1,
    "SOCKET_TIMEOUT": 10.0,
    "SOCKET_CONNECT_TIMEOUT": 5.0,
    "BLOCK_TIMEOUT": 2.0,  # longest blocking read; must stay below SOCKET_TIMEOUT
    # Delivery
    "VISIBILITY_TIMEOUT": 60,  # idle seconds before the reaper's PEL backstop looks at an entry
    "HEARTBEAT_INTERVAL": 2.0,
    "LEASE_TIMEOUT": None,  # seconds a worker's claim lasts without renewal; None = 5 heartbeats
    "TASK_MODULES": [],
    "DEFAULT_QUEUE": "default",
    # The queues tasks may use; None = the default queue plus every queue a task names
    "QUEUES": None,
    "DEFAULT_MAX_ATTEMPTS": 3,
    "RETRY_BASE": 1.0,
    "RETRY_CAP": 300.0,
    "RETRY_JITTER": 0.5,
    "DEFAULT_TIMEOUT": None,  # seconds; None = no limit
    # Retention and limits
    "RESULT_TTL": 86400,
    "RETENTION": 7 * 86400,
    "DLQ_ENABLED": True,
    "DLQ_RETENTION": 30 * 86400,
    "EVENT_STREAM_MAXLEN": 10000,
    "MAX_PAYLOAD_BYTES": 64 * 1024,  # JSON arguments of one task (docs/sizing.md)
    "MAX_DELAY": 366 * 86400,
    "MAX_QUEUE_DEPTH": 100_000,  # 0 = unlimited; counts queued, running and scheduled tasks
    "QUEUE_MAX_DEPTH": {},  # per-queue overrides of MAX_QUEUE_DEPTH
    "IDEMPOTENCY_TTL": 86400,
    # Durable submit: enqueue() and operator actions return only once this many replicas
    # have the write (WAIT; WAITAOF where the server has it), or raise NotReplicated.
    "SUBMIT_REPLICAS": 0,
    "SUBMIT_REPLICAS_TIMEOUT": 1.0,  # seconds to wait for them
    # Processes
    "SCHEDULER_INTERVAL": 0.5,
    "SCHEDULER_BATCH": 500,
    "REAPER_INTERVAL": 1.0,
    "REAPER_BATCH": 200,
    "FINALIZE_BATCH": 256,
    "FINALIZE_FLUSH_MS": 1.0,
    "WORKER_CONCURRENCY": 16,
    # REST API (dtq.api)
    "METRICS_TOKEN": None,  # bearer token that may read /metrics and ready/ without a user
    "API_MAX_BODY_BYTES": 1024 * 1024,  # request bodies above this get 413 before parsing
    "API_SUBMIT_THROTTLE": None,  # DRF rate of API task submissions per user, e.g. "100/minute"
    "API_PAGE_SIZE": 50,  # default page size of list endpoints (at most 1000)
    # Live events websocket (dtq.consumers)
    "LIVE_RECHECK_INTERVAL": 30.0,  # seconds between two checks that a socket's user may watch
    "LIVE_MAX_SOCKETS_PER_USER": 10,  # open sockets per user in one server process
    "BULK_REQUEST_LIMIT": 2000,  # tasks or DLQ entries one API/admin bulk request acts on
    "API_IDEMPOTENCY_SCOPE": "user",  # "user": each user's keys are their own; "queue": shared
    # Audit log
    "AUDIT_DATABASE": None,  # alias for audit rows; None = dtq's own connection to "default"
    "API_READ_THROTTLE": None,  # DRF rate for GETs per user (scope dtq_read), e.g. "600/minute"
    # Reads (admin, API, /metrics, dtq_status)
    "READ_BUDGET": 1000,  # Redis commands one request's reads may send in total
}


class DtqSettings:
    """Read access to settings.DTQ with defaults; unknown keys raise ConfigurationError."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        user = getattr(django_settings, "DTQ", {}) or {}
        if not isinstance(user, dict):
            raise ConfigurationError("settings.DTQ must be a dict")
        unknown = sorted(set(user) - set(DEFAULTS))
        if unknown:
            raise ConfigurationError(f"unknown DTQ setting(s): {', '.join(unknown)}")
        return {**DEFAULTS, **user}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._cache is None:
            self._cache = self._load()
        try:
            return self._cache[name]
        except KeyError:
            raise AttributeError(f"no DTQ setting {name!r}") from None

    @property
    def lease_timeout(self) -> float:
        """Seconds a claim stays valid without a heartbeat renewing it."""
        lease = self.LEASE_TIMEOUT
        return float(lease) if lease else max(5.0 * float(self.HEARTBEAT_INTERVAL), 3.0)

    def max_depth(self, queue: str) -> int:
        """Return the depth limit of a queue (0 = unlimited)."""
        return int(self.QUEUE_MAX_DEPTH.get(queue, self.MAX_QUEUE_DEPTH) or 0)

    def reload(self) -> None:
        """Forget cached values so the next read sees the current settings."""
        self._cache = None


dtq_settings = DtqSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "DTQ":
        dtq_settings.reload()
        from dtq.engine import connection

        connection.reset()
