"""Durable writes: return only once SUBMIT_REPLICAS replicas have a write (docs/scaling.md).

Replication is asynchronous: a primary acknowledges a write before any replica has it, and a
failover promotes a replica that may lack it. WAIT n blocks until n replicas acknowledged
every write the calling connection made; WAITAOF (Redis/Valkey 7.2+) until they also wrote it
to their append-only file. Neither undoes a write that fewer replicas received: a timeout
leaves it on the primary, where it may still run, so the caller hears NotReplicated.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq.conf import dtq_settings
from dtq.engine.direct import own_connection
from dtq.engine.errors import NotReplicated
from dtq.engine.keys import Keys

WAITAOF_SINCE = (7, 2)
MARK_TTL_MS = 60_000  # the marker write below expires by itself
_commands: dict[tuple[str, int], str] = {}  # per server address: "WAIT" or "WAITAOF"


def wanted() -> int:
    """Return how many replicas must confirm a write (0: no waiting)."""
    return int(dtq_settings.SUBMIT_REPLICAS)


def confirm_submit(client: Any, what: str) -> None:
    """Wait until enough replicas have this thread's submits (direct.py's own connection)."""
    if wanted() > 0:
        confirm_connection(own_connection(client), what)


def confirm_connection(conn: Any, what: str) -> None:
    """Wait until enough replicas have every write made over conn, or raise NotReplicated.

    conn is the very connection the write went over: WAIT counts that connection's writes.
    One that dropped since cannot tell, so a lost connection counts as no confirmation.
    """
    n = wanted()
    if n <= 0:
        return
    timeout = float(dtq_settings.SUBMIT_REPLICAS_TIMEOUT)
    if getattr(conn, "_sock", True) is None:  # reconnecting would WAIT for nothing
        raise NotReplicated(what, n, 0, timeout)
    try:
        command = _command(conn)
        conn.send_command(*_wait_args(command, n, timeout))
        got = _replicas(command, conn.read_response())
    except (RedisConnectionError, RedisTimeoutError):
        conn.disconnect()
        raise NotReplicated(what, n, 0, timeout) from None
    if got < n:
        raise NotReplicated(what, n, got, timeout)


def confirm_writes(client: Any, keys: Keys, what: str) -> None:
    """Wait until enough replicas have every write the server took so far (operator actions).

    The action's writes may have gone over any connection of the pool, so this one first
    writes a marker of its own: the replication stream is in order, so a replica that has
    the marker has everything the primary took before it.
    """
    n = wanted()
    if n <= 0:
        return
    timeout = float(dtq_settings.SUBMIT_REPLICAS_TIMEOUT)
    command = _choose(client.info("server"), client.info("persistence"))
    with client.pipeline(transaction=False) as pipe:  # one connection: WAIT counts its SET
        pipe.set(keys.durable_mark, "1", px=MARK_TTL_MS)
        pipe.execute_command(*_wait_args(command, n, timeout))
        got = _replicas(command, pipe.execute()[1])
    if got < n:
        raise NotReplicated(what, n, got, timeout)


def _command(conn: Any) -> str:
    """Return WAITAOF when the server has it and keeps an AOF, else WAIT (cached per server)."""
    address = (str(conn.host), int(conn.port))
    found = _commands.get(address)
    if found is None:
        infos = []
        for section in ("server", "persistence"):
            conn.send_command("INFO", section)
            infos.append(_parse_info(conn.read_response()))
        found = _commands[address] = _choose(*infos)
    return found


def _choose(server: dict[str, Any], persistence: dict[str, Any]) -> str:
    # Valkey reports its Redis-compatible version here too (7.2.4 for Valkey 7 and 8).
    version = tuple(int(p) for p in str(server.get("redis_version", "0.0")).split(".")[:2])
    aof = str(persistence.get("aof_enabled", "0")) == "1"
    return "WAITAOF" if version >= WAITAOF_SINCE and aof else "WAIT"


def _wait_args(command: str, n: int, timeout: float) -> tuple[Any, ...]:
    millis = max(1, int(timeout * 1000))
    # WAITAOF numlocal numreplicas timeout: the primary's own fsync is appendfsync's business.
    return ("WAITAOF", 0, n, millis) if command == "WAITAOF" else ("WAIT", n, millis)


def _replicas(command: str, reply: Any) -> int:
    return int(reply[1]) if command == "WAITAOF" else int(reply)


def _parse_info(text: Any) -> dict[str, str]:
    if isinstance(text, bytes):
        text = text.decode()
    pairs = (line.split(":", 1) for line in str(text).splitlines() if ":" in line)
    return {key: value for key, value in pairs}
