"""Sentinel-managed connections and pools that follow the primary the Sentinels name.

redis-py's SentinelManagedConnection looks the primary up only in connect(); a connection
that dropped (the primary died) reconnects inside send_packed_command through
connect_check_health, which dials the address it had before (or, for a connection never
used, redis-py's default localhost:6379). Looking the primary up in _connect, the one step
every path takes, makes each reconnect reach the primary the Sentinels name now.

A connection that never drops never reconnects, though: when the Sentinels promote a replica
while the old primary is still alive (cut off from them, or too slow to answer them), every
open connection keeps writing to the old primary, and what it accepts there is wiped when it
rejoins as a replica. The pools below ask the Sentinels again at most once a PRIMARY_CHECK_S
while they are used, off the caller's path. When the answer changed, redis-py's
get_master_address disconnects the pool's idle connections (they reconnect to the new
primary) and release() drops each busy one as it is returned, since the pool no longer owns
its address; a connection held outside the pool (dtq.engine.direct's) asks stale() before
each request it starts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from redis.connection import AbstractConnection
from redis.exceptions import RedisError

log = logging.getLogger("dtq.sentinel")
# How stale a process's idea of the primary may grow while it sends commands: the longest a
# deposed primary keeps taking this process's writes after the Sentinels named another.
PRIMARY_CHECK_S = 1.0


class SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """A connection to the primary the Sentinels name when it connects."""

    def connect(self) -> None:
        AbstractConnection.connect(self)  # skip the parent's lookup: _connect does it

    def _connect(self) -> Any:
        if self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        return super()._connect()


class AsyncSentinelConnection(aiosentinel.SentinelManagedConnection):
    """The asyncio twin of SentinelConnection."""

    async def connect(self) -> None:
        await aiosentinel.Connection.connect(self)

    async def _connect(self) -> None:
        if self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super()._connect()


def stale(conn: Any) -> bool:
    """Return True when conn is set to a server the Sentinels no longer name as primary.

    Call it only between requests (nothing unread on conn): the caller drops conn, which
    then reconnects to the new primary. Starts a check of its pool when one is due.
    """
    pool = getattr(conn, "connection_pool", None)  # only a Sentinel-managed connection's
    owner = getattr(pool, "connection_pool_ref", None)  # redis-py's sync proxy of the pool
    if owner is not None:
        pool = owner()
    check = getattr(pool, "check_primary", None)
    if check is None:
        return False
    check()
    primary = pool.master_address  # type: ignore[union-attr]
    return primary is not None and (conn.host, conn.port) != tuple(primary)


def _due(pool: Any) -> bool:
    """Return True, once per PRIMARY_CHECK_S, when pool should ask the Sentinels again."""
    now = time.monotonic()
    if pool.next_primary_check == 0.0:  # its first connection asks them anyway
        pool.next_primary_check = now + PRIMARY_CHECK_S
    if not pool.is_master or now < pool.next_primary_check:
        return False
    pool.next_primary_check = now + PRIMARY_CHECK_S
    return True


def _report(pool: Any, before: Any, answer: Any) -> None:
    """Log a check's answer when it moved the pool, or failed after one that had not."""
    if isinstance(answer, BaseException):
        # The connections keep the primary they have; the next check asks again.
        level = logging.DEBUG if pool.primary_check_failed else logging.WARNING
        log.log(level, "dtq could not ask the Sentinels for the primary: %s", answer)
        pool.primary_check_failed = True
        return
    pool.primary_check_failed = False
    if before is not None and tuple(answer) != tuple(before):
        log.warning(
            "the Sentinels name %s:%s as primary now (was %s:%s): dtq's connections move",
            *answer,
            *before,
        )


class SentinelPool(redis.sentinel.SentinelConnectionPool):
    """A primary's pool that asks the Sentinels again, in a thread, while it is used."""

    next_primary_check = 0.0  # not used yet
    primary_check_failed = False
    _checking: threading.Thread | None = None

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.check_primary()
        return super().get_connection(*args, **kwargs)

    def check_primary(self) -> None:
        """Ask the Sentinels again in a thread of its own, when a check is due."""
        if _due(self) and (self._checking is None or not self._checking.is_alive()):
            self._checking = threading.Thread(
                target=self._check, name="dtq-sentinel-check", daemon=True
            )
            self._checking.start()

    def _check(self) -> None:
        before = self.master_address
        try:
            answer: Any = self.get_master_address()
        except (RedisError, OSError) as exc:
            answer = exc
        _report(self, before, answer)


class AsyncSentinelPool(aiosentinel.SentinelConnectionPool):
    """The asyncio twin of SentinelPool: the check is a task on the pool's event loop."""

    next_primary_check = 0.0
    primary_check_failed = False
    _checking: asyncio.Task[None] | None = None  # held, so the task is not collected early

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.check_primary()
        return await super().get_connection(*args, **kwargs)

    def check_primary(self) -> None:
        """Ask the Sentinels again in a task of its own, when a check is due."""
        if _due(self) and (self._checking is None or self._checking.done()):
            self._checking = asyncio.get_running_loop().create_task(self._check())

    async def _check(self) -> None:
        before = self.master_address
        try:
            answer: Any = await self.get_master_address()
        except (RedisError, OSError) as exc:
            answer = exc
        _report(self, before, answer)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        checking = self._checking  # a closing client ends its check too, never the loop
        if inuse_connections and checking is not None and checking is not asyncio.current_task():
            checking.cancel()
        await super().disconnect(inuse_connections)
