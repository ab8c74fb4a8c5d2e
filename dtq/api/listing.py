"""Task and DLQ lists across queues and filters, built on read_side.search_tasks/search_dlq.

Pages of several queues merge newest first by the time each task entered its state (the
index score), with the cursor "<score>:<id>". Every page costs at most the read budget
(DTQ['READ_BUDGET']): queues beyond what it pays for are left out, and records a filter would
have to read beyond it are left for the next page; such a page says `partial`. A filtered
page can be short, or even empty, and still have a next cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dtq.engine import read_side
from dtq.engine.read_side.query import parse, run


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
    q: str = ""  # the search language of read_side.query


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def list_tasks(query: TaskQuery) -> dict[str, Any]:
    """Return {'tasks', 'next_cursor', 'partial', 'scanned'} for the query.

    Raise QueryError for a search that does not parse; the separate filters add to it.
    """
    search = parse(query.q)
    search.narrow(state=query.state, name=query.name)
    after, before = _seconds(query.created_after), _seconds(query.created_before)
    if after is not None:
        search.created_after = max(search.created_after or after, after)
        search.entered_after = max(search.entered_after or after, after)
    if before is not None:
        search.created_before = min(search.created_before or before, before)
    return run(search, query.limit, query.cursor, queues=[query.queue] if query.queue else None)


def list_dlq(queue: str | None, limit: int, cursor: str | None) -> dict[str, Any]:
    """Return DLQ entries newest first over one queue or all, with a total count."""
    queues = [queue] if queue else read_side.queue_names()
    return {**read_side.search_dlq(queues, limit, cursor), "queues_total": len(queues)}
