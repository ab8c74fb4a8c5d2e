"""Task and DLQ lists across queues and filters, built only from records.py's per-queue pages.

records.list_tasks pages one queue, newest first by the time each task entered its state
(the index score, which the record also holds as updated_at), with the cursor
"<score>:<id>". Pages of several queues asked with the same cursor merge into one page by
that same order. Filters records.py does not apply (task name, creation range) are applied
to each page here, within a bounded number of records read per request, so a page can be
short, or even empty, and still have a next cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dtq.engine import ids, records

SCAN_FACTOR = 10  # records read per requested one when filters drop some, at most


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskQuery:
    """What the task list asks for."""

    queue: str | None = None
    state: str | None = None
    name: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = 50
    cursor: str | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        """Return True when the record passes the filters records.py does not apply."""
        if self.name is not None and record.get("name") != self.name:
            return False
        created = ids.created_ms(record["id"]) / 1000 if ids.is_valid(record.get("id", "")) else 0
        if self.created_after is not None and created < self.created_after.timestamp():
            return False
        return self.created_before is None or created < self.created_before.timestamp()

    @property
    def filtered(self) -> bool:
        return bool(self.name or self.created_after or self.created_before)


def _score(record: dict[str, Any]) -> tuple[int, str]:
    return round((record.get("updated_at") or 0) * 1000), record["id"]


def _merged_page(queues: list[str], state: str | None, limit: int, cursor: str | None) -> Any:
    """Return one page (newest first) over several queues, with records.py's cursor format."""
    if len(queues) == 1:
        return records.list_tasks(queues[0], state, limit, cursor)
    tasks: list[dict[str, Any]] = []
    more = False
    for queue in queues:
        page = records.list_tasks(queue, state, limit, cursor)
        tasks.extend(page["tasks"])
        more = more or page["next_cursor"] is not None
    tasks.sort(key=_score, reverse=True)
    more = more or len(tasks) > limit
    tasks = tasks[:limit]
    last = _score(tasks[-1]) if tasks else None
    return {"tasks": tasks, "next_cursor": f"{last[0]}:{last[1]}" if more and last else None}


def list_tasks(query: TaskQuery) -> dict[str, Any]:
    """Return {'tasks', 'next_cursor'} for the query; see the module docstring for paging."""
    queues = [query.queue] if query.queue else records.queue_names()
    if not queues:
        return {"tasks": [], "next_cursor": None}
    if not query.filtered:
        return _merged_page(queues, query.state, query.limit, query.cursor)
    found: list[dict[str, Any]] = []
    cursor, budget = query.cursor, query.limit * SCAN_FACTOR
    while budget > 0 and len(found) < query.limit:
        page = _merged_page(queues, query.state, query.limit, cursor)
        budget -= query.limit
        found.extend(t for t in page["tasks"] if query.matches(t))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if len(found) > query.limit:  # the cursor must point at the last task returned
        found = found[: query.limit]
        cursor = "{}:{}".format(*_score(found[-1]))
    return {"tasks": found, "next_cursor": cursor}


def _entry_key(entry: dict[str, Any]) -> tuple[int, int, str]:
    millis, _, seq = entry["entry_id"].partition("-")
    return int(millis), int(seq or 0), entry["queue"]


def list_dlq(queue: str | None, limit: int, cursor: str | None) -> dict[str, Any]:
    """Return DLQ entries newest first over one queue or all, with a total count."""
    queues = [queue] if queue else records.queue_names()
    entries: list[Any] = []
    more, total = False, 0
    for name in queues:
        page = records.dlq_entries(name, limit, cursor)
        entries.extend(page["entries"])
        total += page["total"]
        more = more or page["next_cursor"] is not None
    entries.sort(key=_entry_key, reverse=True)
    more = more or len(entries) > limit
    entries = entries[:limit]
    next_cursor = entries[-1]["entry_id"] if more and entries else None
    return {"entries": entries, "next_cursor": next_cursor, "total": total}
