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
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, OutOfMemoryError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from dtq.conf import dtq_settings

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

_lock = threading.Lock()
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


def _sync_client() -> redis.Redis:
    return redis.Redis.from_url(
        redis_url(),
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), 6),
        retry_on_error=RETRY_ON,
        **_options(),
    )


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


def _async_client() -> aioredis.Redis:
    from redis.asyncio.retry import Retry as AsyncRetry

    pool = aioredis.ConnectionPool.from_url(
        redis_url(),
        retry=AsyncRetry(ExponentialBackoff(cap=2.0, base=0.05), 6),
        retry_on_error=RETRY_ON,
        **_options(),
    )
    pool.connection_class = _with_hiredis_packing(pool.connection_class)
    client = aioredis.Redis(connection_pool=pool)
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
    """Return this process's synchronous client."""
    _check_fork()
    client = _clients.get("sync")
    if client is None:
        with _lock:
            client = _clients.get("sync") or _sync_client()
            _clients["sync"] = client
    return client


def new_async_client() -> aioredis.Redis:
    """Return a new asyncio client (one per event loop; the caller closes it)."""
    return _async_client()


def reset() -> None:
    """Drop cached clients, e.g. after the settings changed."""
    with _lock:
        client = _clients.pop("sync", None)
    if client is not None:
        client.close()


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "DTQ":
        reset()  # the next client reads the changed URL and timeouts
