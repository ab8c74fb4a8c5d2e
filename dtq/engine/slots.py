"""Redis Cluster: connections that always reach the primary serving one hash slot.

Every key dtq writes for a shard carries the hash tag ``{shard}``, so all of a shard's keys
live in one slot, on one primary. A connection of a slot's pool asks the cluster which
primary serves that slot when it connects, and treats a MOVED or ASK reply (the slot moved,
or its primary failed over), CLUSTERDOWN and TRYAGAIN like a dropped connection: it forgets
the slot map and raises ConnectionError, so the caller's resend (redis-py's Retry, or
direct.py's) reconnects to the current primary. The refused command did not run there, and
every script is safe to receive twice, so a resend can neither lose nor double a write.

The rest of dtq sees a plain ``redis.Redis`` per slot (scripts, pipelines, MULTI, blocking
reads all work unchanged): ``slot_client(key)`` is the one entry point.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis
import redis.asyncio.connection as aioconnection
from redis.connection import Connection
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

# Replies that mean "this node does not serve the slot now": reconnect and send again.
REROUTE = (AskError, ClusterDownError, TryAgainError)  # MovedError is an AskError


class SlotMap:
    """Which primary serves each slot, learned from CLUSTER SLOTS on any reachable node."""

    def __init__(self, seeds: list[tuple[str, int]], options: dict[str, Any]) -> None:
        self._nodes = list(seeds)  # every node we know, the seeds first
        self._options = options  # auth, TLS and timeouts for the CLUSTER SLOTS queries
        self._ranges: list[tuple[int, int, str, int]] = []
        self._lock = threading.Lock()

    def primary(self, slot: int) -> tuple[str, int]:
        """Return (host, port) of the primary that serves slot, asking the cluster if unknown."""
        with self._lock:
            found = self._find(slot)
            if found is None:
                self._refresh()
                found = self._find(slot)
        if found is None:
            raise RedisConnectionError(f"no primary of the Redis Cluster serves slot {slot}")
        return found

    def forget(self) -> None:
        """Drop the map: the next primary() asks the cluster again (after MOVED or failover)."""
        with self._lock:
            self._ranges = []

    def _find(self, slot: int) -> tuple[str, int] | None:
        for first, last, host, port in self._ranges:
            if first <= slot <= last:
                return host, port
        return None

    def _refresh(self) -> None:
        errors = []
        for host, port in list(self._nodes):
            try:
                node = redis.Redis(host=host, port=port, **self._options)
                try:
                    reply = node.execute_command("CLUSTER SLOTS")
                finally:
                    node.close()
            except redis.RedisError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            self._learn(reply, host)
            return
        raise RedisConnectionError("no Redis Cluster node answered: " + "; ".join(errors))

    def _learn(self, reply: list[Any], asked: str) -> None:
        ranges = []
        for first, last, primary, *replicas in reply:
            # An empty host means "the address you reached me on" (cluster-announce-ip unset).
            host = _text(primary[0]) or asked
            ranges.append((int(first), int(last), host, int(primary[1])))
            for node in (primary, *replicas):
                address = (_text(node[0]) or asked, int(node[1]))
                if address not in self._nodes:
                    self._nodes.append(address)
        self._ranges = ranges


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SlotConnection(Connection):
    """A connection to whichever primary serves its slot now."""

    def __init__(self, *, slot_map: SlotMap, slot: int, **kwargs: Any) -> None:
        self.slot_map = slot_map
        self.slot = slot
        super().__init__(**kwargs)

    def _connect(self) -> Any:
        self.host, self.port = self.slot_map.primary(self.slot)
        try:
            return super()._connect()
        except OSError:
            self.slot_map.forget()  # the primary may be gone: ask again on the next attempt
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except REROUTE as exc:
            raise _rerouted(self, exc) from exc


class AsyncSlotConnection(aioconnection.Connection):
    """The asyncio twin of SlotConnection."""

    def __init__(self, *, slot_map: SlotMap, slot: int, **kwargs: Any) -> None:
        self.slot_map = slot_map
        self.slot = slot
        super().__init__(**kwargs)

    async def _connect(self) -> None:
        # The slot map's query is a short blocking call: keep it off the event loop.
        self.host, self.port = await asyncio.to_thread(self.slot_map.primary, self.slot)
        try:
            await super()._connect()
        except OSError:
            self.slot_map.forget()
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except REROUTE as exc:
            raise await self.rerouted(exc) from exc

    async def rerouted(self, exc: ResponseError) -> RedisConnectionError:
        """Drop this connection after a reply that says the slot is served elsewhere now;
        return the ConnectionError that makes the caller resend (see _rerouted)."""
        await self.disconnect()
        return _rerouted(self, exc)


def _rerouted(conn: Any, exc: ResponseError) -> RedisConnectionError:
    """Forget the slot map and return the ConnectionError that makes the caller resend."""
    conn.slot_map.forget()
    if isinstance(conn, Connection):
        conn.disconnect()
    return RedisConnectionError(f"slot {conn.slot} is not served here now ({exc}); reconnecting")


def slot_of(key: str) -> int:
    """Return the hash slot of a key (its {tag} when it has one)."""
    return int(key_slot(key.encode()))
