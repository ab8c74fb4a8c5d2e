"""Read the Redis side of a run after the drain: records, counters, DLQ, idempotency records,
events and leftovers, written to snapshot.json for the offline checker."""

from __future__ import annotations

import json
from typing import Any

import redis

from dtq.engine import events
from dtq.engine.keys import BANDS, GROUP, Keys
from dtq.engine.layout import STATE_ORDER
from tests.chaos.config import QUEUE

RECORD_FIELDS = (
    "id",
    "name",
    "state",
    "attempt",
    "max_attempts",
    "created_at",
    "finished_at",
    "run_after",
    "idem",
    "dlq",
    "cancel",
    "error",
    "history",
)
NOT_DONE = ("PENDING", "QUEUED", "RUNNING", "RETRYING")


def leftovers(client: redis.Redis, keys: Keys) -> dict[str, int]:
    """Return everything still in flight; all zero once the queue is drained."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.running)
    pipe.zcard(keys.schedule)
    for state in NOT_DONE:
        pipe.zcard(keys.index(QUEUE, state))
    for band in BANDS:
        pipe.xlen(keys.stream(QUEUE, band))
    running, schedule, *rest = pipe.execute()
    out = {"running": running, "schedule": schedule}
    out.update({f"index_{s.lower()}": n for s, n in zip(NOT_DONE, rest, strict=False)})
    out["stream_entries"] = sum(rest[len(NOT_DONE) :])
    out["limit_slots_held"] = int(client.zcard(keys.limit_held(QUEUE)))
    out["limit_waiting"] = int(client.zcard(keys.limit_wait(QUEUE)))
    out["pending"] = pending_entries(client, keys)
    return out


def pending_entries(client: redis.Redis, keys: Keys) -> int:
    """Return how many entries of the chaos queue are read and not acknowledged (XPENDING)."""
    total = 0
    for band in BANDS:
        stream = keys.stream(QUEUE, band)
        if client.exists(stream) and client.xinfo_groups(stream):
            total += int(client.xpending(stream, GROUP)["pending"])
    return total


def _records(client: redis.Redis, keys: Keys) -> dict[str, dict[str, Any]]:
    names = list(client.scan_iter(keys.task("*"), count=1000))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hmget(name, RECORD_FIELDS)
    records = {}
    for values in pipe.execute():
        rec = dict(zip(RECORD_FIELDS, values, strict=True))
        if rec["id"]:
            rec["history"] = json.loads(rec["history"] or "[]")
            rec["error"] = json.loads(rec["error"]) if rec["error"] else None
            records[rec["id"]] = rec
    return records


def _events(client: redis.Redis, keys: Keys) -> list[list[Any]]:
    """Return every lifecycle event as [type, task, attempt, state, ms]."""
    out, cursor = [], "-"
    while True:
        batch = client.xrange(keys.events, cursor, "+", count=5000)
        for e in events.decode(batch):
            out.append([e["type"], e["task"], e.get("attempt"), e.get("state"), e["ts"]])
        if len(batch) < 5000:
            return out
        cursor = "(" + batch[-1][0]


def _workflows(client: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    """Return every workflow hash (the fan-in state) by workflow id."""
    names = [n for n in client.scan_iter(keys.workflow("*"), count=1000) if ":ready" not in n]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(name)
    return {h["id"]: h for h in pipe.execute() if h.get("id")}


def take(client: redis.Redis, prefix: str, idem_keys: list[str]) -> dict[str, Any]:
    """Return the whole Redis side of a run as JSON-ready data."""
    keys = Keys(prefix, 0)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.stats(QUEUE))
    pipe.xrange(keys.dlq(QUEUE))
    pipe.zrange(keys.schedule, 0, -1)
    pipe.zrange(keys.running, 0, -1)
    for state in STATE_ORDER:
        pipe.zrange(keys.index(QUEUE, state), 0, -1)
    for key in idem_keys:
        pipe.hgetall(keys.idempotency(QUEUE, key))
    stats, dlq, schedule, running, *rest = pipe.execute()
    indexes, idem = rest[: len(STATE_ORDER)], rest[len(STATE_ORDER) :]
    return {
        "redis_version": client.info("server")["redis_version"],
        "appendfsync": client.config_get("appendfsync").get("appendfsync"),
        "stats": {k: int(v) for k, v in stats.items()},
        "dlq": [{"entry": eid, "task": f["t"], "attempts": f.get("attempts")} for eid, f in dlq],
        "schedule": schedule,
        "running": running,
        "indexes": {str(s): ids for s, ids in zip(STATE_ORDER, indexes, strict=True)},
        "idempotency": dict(zip(idem_keys, idem, strict=True)),
        "leftovers": leftovers(client, keys),
        "records": _records(client, keys),
        "events": _events(client, keys),
        "workflows": _workflows(client, keys),
    }
