"""The one caller of every Lua script, sync and async, straight on a redis-py connection.

One script call per task (submit) or per batch (the worker's read, claim and finalize) is
all the hot paths do, and redis-py's client layer around a call (pool checkout, retry and
instrumentation wrappers, pure-Python packing in the sync client) cost more CPU than the
call itself. This module keeps what matters from it: the connection (auth, TLS, database,
hiredis parsing, timeouts) and one policy for every script, hot or not:
- a dropped connection: resend with backoff (every script is safe to receive twice: see
  the "Resend:" line of each script's header), at most RESENDS times;
- NOSCRIPT or "Function not found" (Redis restarted, failed over to a server without dtq's
  code, or its scripts were flushed): load the script (or the library) and resend;
- an error reply (a refused write: OOM, READONLY, MISCONF; a bad argument): raised at once.
On Redis >= 7.0 (and Valkey) the hot scripts are functions of one library (scripts.library()),
called with FCALL: their prelude is built once when the library loads, not on every call.
The other scripts, and all of them elsewhere (the embedded Redis 6.2), are called with
EVALSHA. Which way a connection calls is learned on its first call after it connects
(FUNCTION LIST, loading the library when it is missing), never per call.
Only the gateway (gateway.py) calls these.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq.engine import sentinels, slots
from dtq.engine.scripts import Library, Script, library

RESENDS = 6  # as many as the clients' Retry in connection.py
DROPPED = (RedisConnectionError, RedisTimeoutError, ConnectionResetError)


def backoff(resend: int) -> float:
    """Seconds to wait before the given resend (0-based): 50 ms doubling, at most 2 s."""
    return float(min(2.0, 0.05 * 2**resend))


def resend_after_drop(resend: int, exc: BaseException) -> float:
    """Return the wait before resend number `resend` after a drop, or raise exc: out of tries."""
    if resend == RESENDS:
        raise exc
    return backoff(resend)


def pack(*command: Any) -> bytes:
    """Return one command packed by hiredis' C packer."""
    return bytes(pack_command(command))


# How each connection calls scripts since it connected: with the Library when its server has
# Redis Functions, else (None) with EVALSHA. Forgotten when the connection drops (it may come
# back to another server) and when the server answers that the library is missing.
_ways: weakref.WeakKeyDictionary[Any, Library | None] = weakref.WeakKeyDictionary()
_UNKNOWN = object()


def pack_call(way: Library | None, script: Script, keys: list[Any], args: list[Any]) -> bytes:
    """Return the FCALL of a script of the library, else its EVALSHA, packed by hiredis."""
    function = way.functions.get(script.sha) if way else None
    if function:
        return pack("FCALL", function, len(keys), *keys, *args)
    return pack("EVALSHA", script.sha, len(keys), *keys, *args)


def missing(exc: ResponseError) -> bool:
    """Whether an error reply says the server lacks the code that was called (nothing ran)."""
    # "unknown command 'FCALL'": a connection that reconnected by itself to a Redis < 7.0.
    return isinstance(exc, NoScriptError) or str(exc).startswith(
        ("Function not found", "unknown command")
    )


def _fcalled(way: Library | None, script: Script) -> bool:
    return way is not None and script.sha in way.functions


def _way(conn: Any) -> Library | None:
    """Return how conn calls scripts, asking its server (and loading the library) the first
    time after each connect."""
    way = _ways.get(conn, _UNKNOWN)
    if way is _UNKNOWN:
        way = library()
        try:
            conn.send_command("FUNCTION", "LIST", "LIBRARYNAME", way.name)
            if not conn.read_response():
                conn.send_command("FUNCTION", "LOAD", "REPLACE", way.text)
                conn.read_response()
        except ResponseError:
            # No Redis Functions (Redis < 7.0, or denied to this user), or no loading them now
            # (a replica, which on a Cluster answers the call itself with MOVED; OOM):
            # EVALSHA until the connection reconnects.
            way = None
        _ways[conn] = way
    return way  # type: ignore[return-value]


def _reload(conn: Any, way: Library | None, script: Script) -> None:
    """Answered "missing": load the script, or ask for the library again on the next call."""
    _ways.pop(conn, None)
    if not _fcalled(way, script):
        conn.send_command("SCRIPT", "LOAD", script.text)
        conn.read_response()


def _drop(conn: Any) -> None:
    """Close a connection that may hold half a reply; it reconnects on its next command."""
    _ways.pop(conn, None)
    conn.disconnect()


_pinned = threading.local()
Call = tuple[list[Any], list[Any]]  # (KEYS, ARGV) of one script call


class Calls(Protocol):
    """Script calls by position: a list, or calls built the first time they are asked for."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Call: ...


def _own_connection(pool: Any) -> Any:
    """Return this thread's own connection of pool, made the first time it is needed.

    Checking a connection out of the pool and back costs a lock and a poll syscall per call;
    a submitting thread keeps one per pool instead (one pool per primary on a Cluster, and a
    thread submitting over shards alternates between them). A new process (fork) gets a new
    connection; a pool dropped when settings reload takes its entry with it.
    """
    held = getattr(_pinned, "held", None)
    if held is None:
        held = _pinned.held = weakref.WeakKeyDictionary()
    pid = os.getpid()
    mine = held.get(pool)
    if mine is None or mine[0] != pid:
        mine = held[pool] = (pid, pool.make_connection())
    return mine[1]


def own_connection(client: Any) -> Any:
    """Return this thread's own connection of client's pool (the one call_script uses)."""
    return _own_connection(client.connection_pool)


def call_script(client: Any, script: Script, keys: list[Any], args: list[Any]) -> Any:
    """Run a script on this thread's own connection of the sync client's pool."""
    conn = _own_connection(client.connection_pool)
    if sentinels.stale(conn):
        _drop(conn)
    resend = 0
    while True:
        way = None
        try:
            way = _way(conn)
            conn.send_packed_command([pack_call(way, script, keys, args)])
            return conn.read_response()
        except DROPPED as exc:
            _drop(conn)
            time.sleep(resend_after_drop(resend, exc))
            resend += 1
        except ResponseError as exc:
            # An error reply (OOM, READONLY, MISCONF...) was read whole: the connection is fine.
            # Never resent here: the caller decides whether a refused write is worth a retry.
            if not missing(exc):
                raise
            _reload(conn, way, script)
        except BaseException:
            _drop(conn)  # interrupted mid-reply: never reuse the stream
            raise


def call_script_many(
    client: Any,
    script: Script,
    calls: Calls,
    window: int = 1,
    decode: Callable[[int, Any], Any] | None = None,
) -> list[Any]:
    """Run a registered script once per (keys, args), pipelined `window` calls per write.

    The next window is packed (a call built on demand is built then) and sent before the
    replies of the last one are read, so the client's work overlaps the server's and at most
    two windows of replies are held. Replies come back in order, each through
    decode(position, reply) when given (as it is read: again if its call is sent again);
    an error reply is returned as its exception, not raised.
    Calls answered NOSCRIPT or "Function not found" did not run: the script (or library) is
    loaded and only they are sent again. After a dropped connection every call of the round
    is sent again (every hot script is safe to receive twice).
    """
    conn = _own_connection(client.connection_pool)
    if sentinels.stale(conn):
        _drop(conn)
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    resend = 0
    while todo:
        unran: list[int] = []
        try:
            way = _way(conn)
            _send_windows(conn, way, script, calls, todo, window, (replies, unran, decode))
            if unran:
                if resend == RESENDS:
                    raise NoScriptError(f"{script.name} is still not loaded after {RESENDS} loads")
                resend += 1
                _reload(conn, way, script)
        except DROPPED as exc:
            _drop(conn)
            time.sleep(resend_after_drop(resend, exc))
            resend += 1
            continue
        except BaseException:
            _drop(conn)  # interrupted mid-reply: never reuse the stream
            raise
        todo = unran
    return replies


# Where _read_replies puts what it reads: replies by position, the positions answered
# "missing" (not run), and the decoder of a reply (None: kept as read).
_Sink = tuple[list[Any], list[int], Callable[[int, Any], Any] | None]


def _send_windows(
    conn: Any,
    way: Library | None,
    script: Script,
    calls: Calls,
    todo: list[int],
    window: int,
    sink: _Sink,
) -> None:
    """Send the calls of todo a window at a time, reading each window's replies one later."""
    in_flight: list[list[int]] = []
    for start in range(0, len(todo), window):
        batch = todo[start : start + window]
        conn.send_packed_command([pack_call(way, script, *calls[i]) for i in batch])
        in_flight.append(batch)
        if len(in_flight) > 1:
            _read_replies(conn, in_flight.pop(0), sink)
    for batch in in_flight:
        _read_replies(conn, batch, sink)


def _read_replies(conn: Any, batch: list[int], sink: _Sink) -> None:
    replies, unran, decode = sink
    for i in batch:
        try:
            reply = conn.read_response()
        except ResponseError as exc:
            if missing(exc):
                unran.append(i)
            else:
                replies[i] = exc
            continue
        replies[i] = reply if decode is None else decode(i, reply)


async def _round_trip(conn: Any, packed: bytes) -> Any:
    """Send one packed command on an asyncio connection and read its reply, in one timeout.

    What redis-py's send_packed_command and read_response do for one call (the same writer,
    hiredis parser and socket timeout), without their per-call wrappers: a timer each and
    health and maintenance checks cost the worker as much as the write and the parse.
    Errors come out as theirs do: a timeout or a socket error as a drop (DROPPED), an error
    reply raised; on a Redis Cluster a MOVED, ASK, CLUSTERDOWN or TRYAGAIN reply as a drop
    too, after forgetting the slot map (what AsyncSlotConnection.read_response does, which
    this bypasses), so the resend reaches the slot's primary now.
    """
    if not conn.is_connected:
        await conn.connect()
    try:
        async with asyncio.timeout(conn.socket_timeout):
            conn._writer.write(packed)
            await conn._writer.drain()
            reply = await conn._parser.read_response()
    except TimeoutError:  # before OSError, its base class
        raise RedisTimeoutError("Timeout talking to Redis") from None
    except OSError as exc:
        raise RedisConnectionError(f"Error talking to Redis: {exc}") from exc
    if isinstance(reply, ResponseError):
        if isinstance(reply, slots.REROUTE) and isinstance(conn, slots.AsyncSlotConnection):
            raise await conn.rerouted(reply) from reply
        raise reply
    return reply


class AsyncCaller:
    """One connection of an asyncio client, owned by one loop of the worker at a time."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._conn: Any = None

    async def connection(self) -> Any:
        """Return the owned connection, taking one from the pool the first time.

        Asked only between requests, so a connection to a deposed primary is dropped here.
        """
        if self._conn is None:
            self._conn = await self._pool.get_connection()
        elif sentinels.stale(self._conn):
            await self._drop(self._conn)
        return self._conn

    async def script(self, script: Script, keys: list[Any], args: list[Any]) -> Any:
        """Run a script; resend after a dropped connection, reload after a "missing" reply."""
        resend = 0
        while True:
            conn = await self.connection()
            try:
                return await _round_trip(conn, await self.packed(conn, script, keys, args))
            except DROPPED as exc:
                await self._drop(conn)
                await asyncio.sleep(resend_after_drop(resend, exc))
                resend += 1
            except ResponseError as exc:
                if not missing(exc):
                    raise
                await self.forget(conn, script)
            except asyncio.CancelledError:
                await self._drop(conn)  # a reply may be half read: never reuse the stream
                raise

    async def packed(self, conn: Any, script: Script, keys: list[Any], args: list[Any]) -> bytes:
        """Return a script call packed for conn, to send in a pipeline of one's own."""
        return pack_call(await self._way(conn), script, keys, args)

    async def forget(self, conn: Any, script: Script) -> None:
        """A packed call was answered "missing": load it (or the library) before the next."""
        way = _ways.pop(conn, None)
        if not _fcalled(way, script):
            await conn.send_command("SCRIPT", "LOAD", script.text)
            await conn.read_response()

    @staticmethod
    async def _way(conn: Any) -> Library | None:
        """The asyncio twin of _way."""
        way = _ways.get(conn, _UNKNOWN)
        if way is _UNKNOWN:
            way = library()
            try:
                await conn.send_command("FUNCTION", "LIST", "LIBRARYNAME", way.name)
                if not await conn.read_response():
                    await conn.send_command("FUNCTION", "LOAD", "REPLACE", way.text)
                    await conn.read_response()
            except ResponseError:
                way = None
            _ways[conn] = way
        return way  # type: ignore[return-value]

    @staticmethod
    async def _drop(conn: Any) -> None:
        _ways.pop(conn, None)
        await conn.disconnect()

    async def aclose(self) -> None:
        """Give the connection back to the pool."""
        if self._conn is not None:
            await self._pool.release(self._conn)
            self._conn = None
