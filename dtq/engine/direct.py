"""The one caller of every Lua script, sync and async, straight on a redis-py connection.

One script call per task (submit) or per batch (the worker's read, claim and finalize) is
all the hot paths do, and redis-py's client layer around a call (pool checkout, retry and
instrumentation wrappers, pure-Python packing in the sync client) cost more CPU than the
call itself. This module keeps what matters from it: the connection (auth, TLS, database,
hiredis parsing, timeouts) and one policy for every script, hot or not:
- a dropped connection: resend with backoff (every script is safe to receive twice: see
  the "Resend:" line of each script's header), at most RESENDS times;
- NOSCRIPT (Redis restarted or its scripts were flushed): load the script and resend;
- an error reply (a refused write: OOM, READONLY, MISCONF; a bad argument): raised at once.
Only the gateway (gateway.py) calls these.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from typing import Any

from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq.engine.scripts import Script

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


def pack_evalsha(script: Script, keys: list[Any], args: list[Any]) -> list[bytes]:
    """Return the EVALSHA of a script, packed by hiredis."""
    return [pack("EVALSHA", script.sha, len(keys), *keys, *args)]


_pinned = threading.local()
Call = tuple[list[Any], list[Any]]  # (KEYS, ARGV) of one script call


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
    packed = pack_evalsha(script, keys, args)
    conn = _own_connection(client.connection_pool)
    resend = 0
    while True:
        try:
            conn.send_packed_command(packed)
            return conn.read_response()
        except NoScriptError:
            conn.send_command("SCRIPT", "LOAD", script.text)
            conn.read_response()
        except DROPPED as exc:
            conn.disconnect()
            time.sleep(resend_after_drop(resend, exc))
            resend += 1
        except ResponseError:
            # An error reply (OOM, READONLY, MISCONF...) was read whole: the connection is fine.
            # Never resent here: the caller decides whether a refused write is worth a retry.
            raise
        except BaseException:
            conn.disconnect()  # interrupted mid-reply: never reuse the stream
            raise


def call_script_many(
    client: Any, script: Script, calls: list[Call], window: int = 500
) -> list[Any]:
    """Run a registered script once per (keys, args), pipelined `window` calls per write.

    The next window is packed and sent before the replies of the last one are read, so the
    client's work overlaps the server's and at most two windows of replies are held.
    Replies come back in order; an error reply is returned as its exception, not raised.
    Calls answered NOSCRIPT did not run: the script is loaded and only they are sent again.
    After a dropped connection every call of the round is sent again (every hot script is
    safe to receive twice).
    """
    conn = _own_connection(client.connection_pool)
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    resend = 0
    while todo:
        missing: list[int] = []
        try:
            _send_windows(conn, script, calls, todo, window, replies, missing)
        except DROPPED as exc:
            conn.disconnect()
            time.sleep(resend_after_drop(resend, exc))
            resend += 1
            continue
        except BaseException:
            conn.disconnect()  # interrupted mid-reply: never reuse the stream
            raise
        if missing:
            if resend == RESENDS:
                raise NoScriptError(f"{script.sha} is still not loaded after {RESENDS} loads")
            resend += 1
            conn.send_command("SCRIPT", "LOAD", script.text)
            conn.read_response()
        todo = missing
    return replies


def _send_windows(
    conn: Any,
    script: Script,
    calls: list[Call],
    todo: list[int],
    window: int,
    replies: list[Any],
    missing: list[int],
) -> None:
    """Send the calls of todo a window at a time, reading each window's replies one later."""
    in_flight: list[list[int]] = []
    for start in range(0, len(todo), window):
        batch = todo[start : start + window]
        conn.send_packed_command([b for i in batch for b in pack_evalsha(script, *calls[i])])
        in_flight.append(batch)
        if len(in_flight) > 1:
            _read_replies(conn, in_flight.pop(0), replies, missing)
    for batch in in_flight:
        _read_replies(conn, batch, replies, missing)


def _read_replies(conn: Any, batch: list[int], replies: list[Any], missing: list[int]) -> None:
    for i in batch:
        try:
            replies[i] = conn.read_response()
        except NoScriptError:
            missing.append(i)
        except ResponseError as exc:
            replies[i] = exc


class AsyncCaller:
    """One connection of an asyncio client, owned by one loop of the worker at a time."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._conn: Any = None

    async def connection(self) -> Any:
        """Return the owned connection, taking one from the pool the first time."""
        if self._conn is None:
            self._conn = await self._pool.get_connection()
        return self._conn

    async def script(self, script: Script, keys: list[Any], args: list[Any]) -> Any:
        """Run a script; resend after a dropped connection, reload after NOSCRIPT."""
        packed = pack_evalsha(script, keys, args)
        resend = 0
        while True:
            conn = await self.connection()
            try:
                await conn.send_packed_command(packed, check_health=False)
                return await conn.read_response()
            except NoScriptError:
                await conn.send_command("SCRIPT", "LOAD", script.text)
                await conn.read_response()
            except DROPPED as exc:
                await conn.disconnect()
                await asyncio.sleep(resend_after_drop(resend, exc))
                resend += 1
            except asyncio.CancelledError:
                await conn.disconnect()  # a reply may be half read: never reuse the stream
                raise

    async def aclose(self) -> None:
        """Give the connection back to the pool."""
        if self._conn is not None:
            await self._pool.release(self._conn)
            self._conn = None
