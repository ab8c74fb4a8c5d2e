"""Read the Redis side of a run after the drain, from every shard: records, counters, DLQ,
idempotency records, events and leftovers, written to snapshot.json for the offline checker.

Each shard is read through its own client (dtq.engine.shards.client: on a Cluster, the primary
of the shard's slot). Totals are summed over shards; what the checker needs per shard (the
shard a record, an index entry, a DLQ entry or a workflow was found in, each shard's counters
and leftovers) is kept beside them.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

import redis

from dtq.engine import events, protocol, shards
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


def every_shard(prefix: str) -> list[tuple[int, redis.Redis, Keys]]:
    """Return (shard, client, keys) of every shard of the run, shard 0 first."""
    return [(n, shards.client(n), shards.keys(n, prefix)) for n in shards.numbers()]


def leftovers_of(client: redis.Redis, keys: Keys) -> dict[str, int]:
    """Return everything still in flight in one shard; all zero once it is drained."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.index(QUEUE, "RUNNING"))  # the leases (scored by deadline)
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


def leftovers(prefix: str) -> list[dict[str, int]]:
    """Return each shard's leftovers, shard 0 first."""
    return [leftovers_of(client, keys) for _, client, keys in every_shard(prefix)]


def total(per_shard: list[dict[str, int]]) -> dict[str, int]:
    """Return counters summed over shards."""
    out: Counter[str] = Counter()
    for counters in per_shard:
        out.update(counters)
    return {name: out[name] for name in sorted(out)}


def pending_entries(client: redis.Redis, keys: Keys) -> int:
    """Return how many entries of the chaos queue are read and not acknowledged (XPENDING)."""
    count = 0
    for band in BANDS:
        stream = keys.stream(QUEUE, band)
        if client.exists(stream) and client.xinfo_groups(stream):
            count += int(client.xpending(stream, GROUP)["pending"])
    return count


def _records(client: redis.Redis, keys: Keys) -> list[dict[str, Any]]:
    names = list(client.scan_iter(keys.task("*"), count=1000))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hmget(name, RECORD_FIELDS)
    records = []
    for values in pipe.execute():
        rec = dict(zip(RECORD_FIELDS, values, strict=True))
        if rec["id"]:
            rec["history"] = json.loads(rec["history"] or "[]")
            rec["error"] = json.loads(rec["error"]) if rec["error"] else None
            rec["shard"] = keys.shard
            records.append(rec)
    return records


def _events(client: redis.Redis, keys: Keys) -> list[list[Any]]:
    """Return every lifecycle event of a shard as [type, task, attempt, state, ms, shard]."""
    out, cursor = [], "-"
    while True:
        batch = client.xrange(keys.events, cursor, "+", count=5000)
        for e in events.decode(batch):
            row = [e["type"], e["task"], e.get("attempt"), e.get("state"), e["ts"], keys.shard]
            out.append(row)
        if len(batch) < 5000:
            return out
        cursor = "(" + batch[-1][0]


def _workflows(client: redis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    """Return every workflow hash of a shard (the fan-in state) by workflow id."""
    names = [n for n in client.scan_iter(keys.workflow("*"), count=1000) if ":ready" not in n]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(name)
    return {h["id"]: h for h in pipe.execute() if h.get("id")}


def _shard(client: redis.Redis, keys: Keys, idem_keys: list[str]) -> dict[str, Any]:
    """Return the raw Redis side of one shard."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.stats(QUEUE))
    pipe.xrange(keys.dlq(QUEUE))
    pipe.zrange(keys.schedule, 0, -1)
    pipe.zrange(keys.index(QUEUE, "RUNNING"), 0, -1)
    for state in STATE_ORDER:
        pipe.zrange(keys.index(QUEUE, state), 0, -1)
    for key in idem_keys:
        pipe.hgetall(keys.idempotency(QUEUE, key))
    stats, dlq, schedule, running, *rest = pipe.execute()
    indexes, idem = rest[: len(STATE_ORDER)], rest[len(STATE_ORDER) :]
    return {
        "stats": protocol.fold_counters({k: int(v) for k, v in stats.items()}),
        "dlq": [
            {"entry": eid, "task": f["t"], "attempts": f.get("attempts"), "shard": keys.shard}
            for eid, f in dlq
        ],
        "schedule": schedule,
        "running": running,
        "indexes": {str(s): ids for s, ids in zip(STATE_ORDER, indexes, strict=True)},
        "idempotency": {k: rec for k, rec in zip(idem_keys, idem, strict=True) if rec},
        "leftovers": leftovers_of(client, keys),
        "records": _records(client, keys),
        "events": _events(client, keys),
        "workflows": _workflows(client, keys),
    }


def take(prefix: str, idem_keys: list[str]) -> dict[str, Any]:
    """Return the whole Redis side of a run, over every shard, as JSON-ready data."""
    home = shards.client(shards.HOME)
    parts = [_shard(client, keys, idem_keys) for _, client, keys in every_shard(prefix)]
    records: dict[str, dict[str, Any]] = {}
    copies: dict[str, list[int]] = defaultdict(list)  # a record found in several shards
    idempotency: dict[str, dict[str, str]] = {}
    idem_shards: dict[str, list[int]] = defaultdict(list)
    workflow_shards: dict[str, int] = {}
    for n, part in enumerate(parts):
        for rec in part["records"]:
            copies[rec["id"]].append(n)
            records.setdefault(rec["id"], rec)
        for key, rec in part["idempotency"].items():
            idem_shards[key].append(n)
            idempotency.setdefault(key, rec)
        workflow_shards.update({wf: n for wf in part["workflows"]})
    return {
        "redis_version": home.info("server")["redis_version"],
        "appendfsync": home.config_get("appendfsync").get("appendfsync"),
        "shards": len(parts),
        "stats": total([p["stats"] for p in parts]),
        "stats_by_shard": [p["stats"] for p in parts],
        "dlq": [entry for p in parts for entry in p["dlq"]],
        "schedule": [tid for p in parts for tid in p["schedule"]],
        "running": [tid for p in parts for tid in p["running"]],
        "indexes": {
            s: [tid for p in parts for tid in p["indexes"][s]] for s in map(str, STATE_ORDER)
        },
        "indexes_by_shard": [p["indexes"] for p in parts],
        "idempotency": {key: idempotency.get(key, {}) for key in idem_keys},
        "idempotency_shards": dict(idem_shards),
        "leftovers": total([p["leftovers"] for p in parts]),
        "leftovers_by_shard": [p["leftovers"] for p in parts],
        "records": records,
        "record_copies": {tid: where for tid, where in copies.items() if len(where) > 1},
        "events": sorted((e for p in parts for e in p["events"]), key=lambda e: e[4]),
        "workflows": {wf: h for p in parts for wf, h in p["workflows"].items()},
        "workflow_shards": workflow_shards,
    }
