"""Sentinel-managed connections that ask the Sentinels for the primary on every reconnect.

redis-py's SentinelManagedConnection looks the primary up only in connect(); a connection
that dropped (the primary died) reconnects inside send_packed_command through
connect_check_health, which dials the address it had before (or, for a connection never
used, redis-py's default localhost:6379). Looking the primary up in _connect, the one step
every path takes, makes each reconnect reach the primary the Sentinels name now.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from redis.connection import AbstractConnection


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
