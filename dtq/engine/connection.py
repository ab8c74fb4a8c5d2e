"""One Redis connection pool per process, with deliberate timeouts and reconnect backoff."""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, OutOfMemoryError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from dtq.conf import dtq_settings
from dtq.engine import sentinels, slots

RETRY_ON = [RedisConnectionError, RedisTimeoutError, ConnectionResetError]
# Errors that mean "Redis cannot serve anyone right now" (down, failing over, full), as opposed
# to Redis refusing one command (a wrong argument or type), which says nothing about its health.
OUTAGE_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterDownError,
    TryAgainError,
    OutOfMemoryError,
)
MASK = "***"
# user:password@ in any URL inside a message (redis://, rediss://, unix://, sentinel...).
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)[^&#\s]*", re.IGNORECASE)

_lock = threading.RLock()  # re-entered: a client being made asks for the slot map
_clients: dict[str, Any] = {}
_pid = os.getpid()


def _options() -> dict[str, Any]:
    # The socket timeout must outlast the longest BLOCK we send, or blocking reads fail.
    # No PING health check: Redis answers PING with MISCONF while a failed save stops writes,
    # which would fail every new connection, reads included; the Retry catches dead sockets.
    return {
        "socket_timeout": dtq_settings.SOCKET_TIMEOUT,
        "socket_connect_timeout": dtq_settings.SOCKET_CONNECT_TIMEOUT,
        "socket_keepalive": True,
        "health_check_interval": 0,
        "decode_responses": True,
    }


def redis_url() -> str:
    """Return the Redis URL: REDIS_URL, or the LOCATION of the REDIS_CACHE cache."""
    alias = dtq_settings.REDIS_CACHE
    if not alias:
        return dtq_settings.REDIS_URL
    from django.conf import settings

    location = settings.CACHES[alias]["LOCATION"]
    return str(location[0] if isinstance(location, (list, tuple)) else location)


def mask_url(url: str) -> str:
    """Return url with its password (in the user part or a password= parameter) masked."""
    url = _URL_PASSWORD.sub(rf"\g<head>{MASK}@", url)
    return _QUERY_PASSWORD.sub(rf"\g<head>{MASK}", url)


def redact(text: str) -> str:
    """Return text (e.g. an exception message) with every Redis URL password masked."""
    text = mask_url(text)
    for password in _configured_passwords():
        text = text.replace(password, MASK)
    return text


def _configured_passwords() -> list[str]:
    """Return the password(s) in the configured URL that are long enough to mask safely."""
    try:
        parts = urlsplit(redis_url())
        found = [parts.password or ""]
    except Exception:  # a broken setting must not hide the message being reported
        return []
    found += [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    return [p for p in found if len(p) >= 4]  # shorter ones would mask ordinary words


def describe(exc: BaseException) -> str:
    """Return an exception as 'Class: message' with passwords masked, for logs and errors."""
    return redact(f"{type(exc).__name__}: {exc}")


class RedactFilter(logging.Filter):
    """Logging filter that masks Redis passwords in every record (usable in LOGGING too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def is_outage(exc: BaseException) -> bool:
    """Return True when a Redis error means Redis is unreachable or cannot take writes now."""
    return isinstance(exc, OUTAGE_ERRORS)


def _retry() -> dict[str, Any]:
    return {
        "retry": Retry(ExponentialBackoff(cap=2.0, base=0.05), 6),
        "retry_on_error": RETRY_ON,
    }


def _url_options() -> dict[str, Any]:
    """Return what the URL says besides the address (database, user, password), for a
    topology that finds its servers itself (Sentinel, Cluster)."""
    options = redis.connection.parse_url(redis_url())
    for name in ("host", "port", "path", "connection_class"):
        options.pop(name, None)
    return options


def _sentinels() -> list[tuple[str, int]]:
    return [(str(host), int(port)) for host, port in dtq_settings.REDIS_SENTINELS or ()]


def _service() -> str:
    return str(dtq_settings.REDIS_SENTINEL_SERVICE)  # the checks ensure it is set


def _sentinel_options() -> dict[str, Any]:
    # Sentinels answer at once: short timeouts, so a dead sentinel costs little.
    timeout = float(dtq_settings.SOCKET_CONNECT_TIMEOUT)
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout}


def _slot_map() -> slots.SlotMap:
    """Return this process's map of the cluster's slots, seeded with the configured node."""
    _check_fork()
    found = _clients.get("slot_map")
    if found is None:
        with _lock:
            found = _clients.get("slot_map")
            if found is None:
                parts = urlsplit(redis_url())
                options = {**_url_options(), **_sentinel_options()}
                options.pop("db", None)  # a cluster has database 0 only
                seed = (parts.hostname or "127.0.0.1", parts.port or 6379)
                found = slots.SlotMap([seed], options)
                _clients["slot_map"] = found
    return found


def _slot_pool_kwargs(slot: int) -> dict[str, Any]:
    options = {**_url_options(), **_options(), **_retry()}
    options.pop("db", None)
    return {"slot_map": _slot_map(), "slot": slot, **options}


def _sync_client(slot: int | None = None) -> redis.Redis:
    if dtq_settings.REDIS_SENTINELS:
        manager = redis.sentinel.Sentinel(_sentinels(), sentinel_kwargs=_sentinel_options())
        return manager.master_for(
            _service(),
            connection_class=sentinels.SentinelConnection,
            connection_pool_class=sentinels.SentinelPool,
            **_url_options(),
            **_options(),
            **_retry(),
        )
    if dtq_settings.REDIS_CLUSTER:
        pool = redis.ConnectionPool(
            connection_class=slots.SlotConnection, **_slot_pool_kwargs(_slot(slot))
        )
        return redis.Redis(connection_pool=pool)
    return redis.Redis.from_url(redis_url(), **_retry(), **_options())


def _slot(slot: int | None) -> int:
    """Return slot, or when None the slot of shard 0 (where every key of one shard lives)."""
    return slots.slot_of("{0}") if slot is None else slot


def _with_hiredis_packing(connection_class: type[Any]) -> type[Any]:
    """Return a subclass that packs commands with hiredis' C packer instead of Python's.

    redis-py's asyncio connections pack in pure Python; the worker's scripts carry hundreds
    of arguments per batch, so packing was a visible share of its CPU time.
    """
    try:
        from hiredis import pack_command
    except ImportError:
        return connection_class

    class HiredisPackingConnection(connection_class):  # type: ignore[misc,valid-type]
        def pack_command(self, *args: Any) -> list[bytes]:
            if isinstance(args[0], str) and " " in args[0]:
                args = tuple(args[0].split()) + args[1:]  # e.g. "CONFIG GET"
            return [pack_command(args)]

    return HiredisPackingConnection


def _async_client(slot: int | None = None) -> aioredis.Redis:
    from redis.asyncio.retry import Retry as AsyncRetry

    retry: dict[str, Any] = {
        "retry": AsyncRetry(ExponentialBackoff(cap=2.0, base=0.05), 6),
        "retry_on_error": RETRY_ON,
    }
    if dtq_settings.REDIS_SENTINELS:
        manager = aiosentinel.Sentinel(_sentinels(), sentinel_kwargs=_sentinel_options())
        client = manager.master_for(
            _service(),
            connection_class=sentinels.AsyncSentinelConnection,
            connection_pool_class=sentinels.AsyncSentinelPool,
            **_url_options(),
            **_options(),
            **retry,
        )
        pool = client.connection_pool
    elif dtq_settings.REDIS_CLUSTER:
        kwargs = {**_slot_pool_kwargs(_slot(slot)), **retry}
        pool = aioredis.ConnectionPool(connection_class=slots.AsyncSlotConnection, **kwargs)
        client = aioredis.Redis(connection_pool=pool)
    else:
        pool = aioredis.ConnectionPool.from_url(redis_url(), **retry, **_options())
        client = aioredis.Redis(connection_pool=pool)
    pool.connection_class = _with_hiredis_packing(pool.connection_class)
    # The pool is this client's alone: aclose() must disconnect it too, or every connection
    # it opened stays open until garbage collection.
    client.auto_close_connection_pool = True
    return client


def _check_fork() -> None:
    global _pid
    if os.getpid() != _pid:  # a forked child must never share its parent's sockets
        _clients.clear()
        _pid = os.getpid()


def get_client() -> redis.Redis:
    """Return this process's synchronous client (on a cluster: for shard 0's slot)."""
    return _cached_client(None)


def client_for_key(key: str) -> redis.Redis:
    """Return the synchronous client that reaches the primary holding key.

    On one server or behind Sentinel that is get_client(); on a Redis Cluster it is a client
    of the primary serving the key's hash slot (following it through MOVED and failovers).
    """
    if not dtq_settings.REDIS_CLUSTER or dtq_settings.REDIS_SENTINELS:
        return get_client()
    slot = slots.slot_of(key)
    return _cached_client(None if slot == _slot(None) else slot)


def routed(client: Any, keys: list[Any]) -> Any:
    """Return the client for the slot of a script call's keys on a Redis Cluster, else client.

    Every script's keys share one hash tag, so the first key names the slot of them all.
    """
    if not keys or not dtq_settings.REDIS_CLUSTER or dtq_settings.REDIS_SENTINELS:
        return client
    return client_for_key(str(keys[0]))


def _cached_client(slot: int | None) -> redis.Redis:
    _check_fork()
    name = "sync" if slot is None else f"sync:{slot}"
    client = _clients.get(name)
    if client is None:
        with _lock:
            client = _clients.get(name) or _sync_client(slot)
            _clients[name] = client
    return client


def new_async_client(key: str | None = None) -> aioredis.Redis:
    """Return a new asyncio client (one per event loop; the caller closes it).

    On a Redis Cluster it reaches the primary of key's slot (shard 0's when key is None).
    """
    if key is None or not dtq_settings.REDIS_CLUSTER:
        return _async_client()
    return _async_client(slots.slot_of(key))


def reset() -> None:
    """Drop cached clients, e.g. after the settings changed."""
    with _lock:
        dropped = [_clients.pop(name) for name in list(_clients)]
    for client in dropped:
        if isinstance(client, redis.Redis):
            client.close()


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "DTQ":
        reset()  # the next client reads the changed URL and timeouts
