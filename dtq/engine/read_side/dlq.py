"""Read side: dead-letter queue entries."""

from __future__ import annotations

from typing import Any, TypedDict

from dtq.engine import cursors, ids
from dtq.engine.connection import get_client
from dtq.engine.keys import check_queue_name
from dtq.engine.read_side.queues import MAX_PAGE, _keys
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


def dlq_entries(queue: str, limit: int = 50, before: str | None = None) -> DlqPage:
    """Return a queue's DLQ entries newest first, starting below the entry id `before`."""
    check_queue_name(queue)
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be in 1..{MAX_PAGE}, got {limit}")
    top = f"({check_entry_id(before)}" if before else "+"
    stream = _keys().dlq(queue)
    pipe = get_client().pipeline(transaction=False)
    pipe.xrevrange(stream, top, "-", count=limit + 1)
    pipe.xlen(stream)
    rows, total = pipe.execute()
    entries = [decode_dlq_entry(queue, eid, fields) for eid, fields in rows[:limit]]
    more = len(rows) > limit
    return {
        "entries": entries,
        "next_cursor": entries[-1]["entry_id"] if more else None,
        "total": int(total),
    }


def dlq_scan(
    queue: str, after: str = "-", upto: str = "+", count: int = DLQ_SCAN_PAGE
) -> list[DlqEntry]:
    """Return up to count DLQ entries oldest first, strictly after `after`, up to `upto`."""
    low = after if after == "-" else f"({after}"
    client: Any = get_client()
    rows = client.xrange(_keys().dlq(queue), low, upto, count=count)
    return [decode_dlq_entry(queue, eid, fields) for eid, fields in rows]


def dlq_last_id(queue: str) -> str | None:
    """Return the id of a queue's newest DLQ entry, or None when the DLQ is empty."""
    client: Any = get_client()
    rows = client.xrevrange(_keys().dlq(queue), "+", "-", count=1)
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
    client: Any = get_client()
    keys = keys_for(task_id)
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
