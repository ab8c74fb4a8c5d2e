"""Read side: dead-letter queue entries."""

from __future__ import annotations

from typing import Any, TypedDict

from dtq.engine import cursors, ids, shards
from dtq.engine.keys import check_queue_name
from dtq.engine.read_side.budget import execute
from dtq.engine.read_side.queues import MAX_PAGE
from dtq.engine.read_side.shard_pipe import ShardPipeline
from dtq.engine.read_side.tasks import _json_or_raw, get_task, keys_for

# ----- dead-letter queues ----------------------------------------------------------------

DLQ_SCAN_PAGE = 500


class DlqEntry(TypedDict):
    """One dead-letter queue entry, decoded; it outlives its task record (DLQ_RETENTION)."""

    entry_id: str
    task_id: str
    name: str
    queue: str
    payload: Any
    attempts: int
    error: Any  # {class, message}
    dead_lettered_at: float | None  # epoch seconds
    created_at: float | None
    priority: int
    max_attempts: int | None
    idempotency_key: str


class DlqPage(TypedDict):
    """One page of a DLQ, newest first; pass next_cursor as `before` for the next page."""

    entries: list[DlqEntry]
    next_cursor: str | None
    total: int


def _ms(value: str | None) -> float | None:
    return int(value) / 1000 if value and value.isdigit() and value != "0" else None


def decode_dlq_entry(queue: str, entry_id: str, fields: dict[str, str]) -> DlqEntry:
    """Convert a raw entry of `queue`'s DLQ stream into typed values."""
    return {
        "entry_id": entry_id,
        "task_id": fields.get("t", ""),
        "name": fields.get("name", ""),
        "queue": queue,
        "payload": _json_or_raw(fields.get("payload")),
        "attempts": int(fields.get("attempts") or 0),
        "error": _json_or_raw(fields.get("error")),
        "dead_lettered_at": _ms(fields.get("at")),
        "created_at": _ms(fields.get("created_at")),
        "priority": int(fields.get("priority") or 0),
        "max_attempts": int(fields["max_attempts"]) if fields.get("max_attempts") else None,
        "idempotency_key": fields.get("idem", ""),
    }


def check_entry_id(entry_id: str) -> str:
    """Return entry_id if it has the shape of a stream entry id, else raise ValueError."""
    return cursors.entry_id(entry_id)


def entry_cursor(entry_id: str, shard: int) -> str:
    """Return the cursor naming a DLQ entry of a shard: '<entry id>', '@<shard>' unless 0.

    Each shard has its own DLQ stream of a queue, and entry ids are unique per stream only.
    """
    return entry_id if shard == 0 else f"{entry_id}@{shard}"


def parse_entry_cursor(cursor: str) -> tuple[str, int]:
    """Return (entry id, shard) of a cursor '<entry id>[@<shard>]', or raise ValueError."""
    entry_id, at, shard = cursor.partition("@")
    number = cursors.number(shard, "cursor shard", shards.count() - 1) if at else 0
    return check_entry_id(entry_id), number


def _entry_order(entry_id: str, shard: int) -> tuple[int, int, int]:
    millis, _, seq = entry_id.partition("-")
    return int(millis), int(seq or 0), shard


def dlq_entries(queue: str, limit: int = 50, before: str | None = None) -> DlqPage:
    """Return a queue's DLQ entries newest first (every shard's, merged) below `before`."""
    check_queue_name(queue)
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be in 1..{MAX_PAGE}, got {limit}")
    cut = parse_entry_cursor(before) if before else None
    pipe = ShardPipeline()
    for keys in shards.every():
        top = "+"
        if cut is not None:  # at the cursor's id: only shards ordered below the cursor's
            top = cut[0] if keys.shard < cut[1] else f"({cut[0]}"
        pipe.on(keys.shard).xrevrange(keys.dlq(queue), top, "-", count=limit + 1)
        pipe.on(keys.shard).xlen(keys.dlq(queue))
    replies = execute(pipe)
    found = sorted(
        (
            (_entry_order(eid, shard), decode_dlq_entry(queue, eid, fields))
            for shard, rows in enumerate(replies[0::2])
            for eid, fields in rows
        ),
        key=lambda item: item[0],
        reverse=True,
    )
    page = found[:limit]
    more = len(found) > limit
    return {
        "entries": [entry for _, entry in page],
        "next_cursor": entry_cursor(page[-1][1]["entry_id"], page[-1][0][2]) if more else None,
        "total": sum(int(n) for n in replies[1::2]),
    }


def dlq_scan(
    queue: str, after: str = "-", upto: str = "+", count: int = DLQ_SCAN_PAGE, shard: int = 0
) -> list[DlqEntry]:
    """Return up to count entries of a shard's DLQ oldest first, after `after`, up to `upto`."""
    low = after if after == "-" else f"({after}"
    client: Any = shards.client(shard)
    rows = client.xrange(shards.keys(shard).dlq(queue), low, upto, count=count)
    return [decode_dlq_entry(queue, eid, fields) for eid, fields in rows]


def dlq_last_id(queue: str, shard: int = 0) -> str | None:
    """Return the id of the newest entry of a shard's DLQ of queue, or None when it is empty."""
    client: Any = shards.client(shard)
    rows = client.xrevrange(shards.keys(shard).dlq(queue), "+", "-", count=1)
    return rows[0][0] if rows else None


def find_dlq_entry(task_id: str, queue: str | None = None) -> DlqEntry | None:
    """Return a task's DLQ entry in O(1): through its record, else through the DLQ index.

    The index (task id -> queue and entry id) outlives the record, which expires before the
    entry does. Nothing is scanned: an id that neither knows is None at once. `queue`, when
    given, must be the queue of an entry found through the index.
    """
    if not ids.is_valid(task_id):
        return None
    if queue is not None:
        check_queue_name(queue)
    keys = keys_for(task_id)
    client: Any = shards.client(keys.shard)
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.task(task_id), "queue", "dlq")
    pipe.hget(keys.dlq_index, task_id)
    (owner, entry_id), indexed = pipe.execute()
    places = [(owner, entry_id)] if owner and entry_id else []
    if indexed:
        name, _, eid = indexed.partition(" ")
        if queue is None or name == queue:
            places.append((name, eid))
    for name, eid in places:
        rows = client.xrange(keys.dlq(name), eid, eid)
        if rows and rows[0][1].get("t") == task_id:
            return decode_dlq_entry(name, *rows[0])
    return None


def dlq_detail(task_id: str, queue: str | None = None) -> dict[str, Any] | None:
    """Return a task's DLQ entry with its record ('record': None once the record expired)."""
    entry = find_dlq_entry(task_id, queue)
    if entry is None:
        return None
    record = get_task(task_id)
    history = (record or {}).get("history") or []
    return {
        "entry": entry,
        "record": record,
        "history": history,
        "errors": [h for h in history if isinstance(h, dict) and h.get("error")],
    }
