"""Read side: task and DLQ pages merged across queues and filters, within the read budget.

A page is a k-way merge of per-queue lists (the per-state index zsets, or the DLQ streams),
newest first. Each list is read only to a bounded depth; a list cut at that depth sets the
merge's horizon (its last item), and only items at or above every horizon are certain to be
in order, so the page stops there and its cursor resumes below. Whatever the data, a page
costs at most the read budget (records.budget): queues beyond what it pays for are left out
and records beyond it are left for the next page, and the page then says it is partial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from dtq.conf import dtq_settings
from dtq.engine import cursors, ids
from dtq.engine.connection import get_client
from dtq.engine.errors import ReadBudgetExceeded
from dtq.engine.keys import Keys, check_queue_name
from dtq.engine.layout import STATE_ORDER
from dtq.engine.read_side.budget import Budget, current, execute
from dtq.engine.read_side.dlq import DlqEntry, check_entry_id, decode_dlq_entry
from dtq.engine.read_side.tasks import decode_record, keys_for
from dtq.engine.state import TaskState

MAX_PAGE = 1000
MAX_CANDIDATES = 20_000  # index members fetched per page at most, over every index
MAX_DLQ_ROWS = 5_000  # DLQ entries fetched per page at most, over every queue
SCAN_CHUNK = 200  # records read per round trip when a filter drops some

Item = tuple[int, str]  # (index score in ms, task id): the order of every task list


class TaskSearch(TypedDict):
    """One page of task records, newest first by the time they entered their state."""

    tasks: list[dict[str, Any]]
    next_cursor: str | None  # "<score>:<id>"; None when nothing is left
    # Queues were left out, or the page holds fewer than `limit` tasks although more may
    # follow (the budget or the merge depth stopped it): follow next_cursor, or narrow it.
    partial: bool
    scanned: int  # task records read for this page
    queues_read: int  # how many of the queues asked for were read (in the order given)


class DlqSearch(TypedDict):
    """One page of DLQ entries, newest first, over several queues."""

    entries: list[DlqEntry]
    next_cursor: str | None  # "<entry id>:<queue>": pass it as `before`
    total: int  # entries in the DLQs that were read
    partial: bool
    queues_read: int


def _keys() -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, 0)


def parse_cursor(cursor: str) -> Item:
    """Return the (score, id) of a task list cursor, or raise ValueError."""
    return cursors.task_cursor(cursor)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be in 1..{MAX_PAGE}, got {limit}")


def _candidates(
    indexes: list[str], after: Item | None, depth: int, low: str, budget: Budget
) -> tuple[list[Item], Item | None]:
    """Return the merged (score, id) items below `after`, newest first, and the horizon."""
    pipe = get_client().pipeline(transaction=False)
    for index in indexes:
        if after is not None:
            # Several tasks can enter a state in the same millisecond (one script, one NOW):
            # take every tie at the cursor's score, then a bounded range strictly below it.
            pipe.zrevrangebyscore(index, after[0], after[0], withscores=True)
        top = "+inf" if after is None else f"({after[0]}"
        pipe.zrevrangebyscore(index, top, low, start=0, num=depth, withscores=True)
    replies = execute(pipe, budget)
    best: dict[str, int] = {}
    horizon: Item | None = None
    step = 1 if after is None else 2
    for i, reply in enumerate(replies):
        for task_id, score in reply:
            best[task_id] = max(best.get(task_id, 0), int(score))  # it moved between reads
        if (i % step == step - 1) and len(reply) >= depth:
            last = (int(reply[-1][1]), reply[-1][0])
            horizon = last if horizon is None else max(horizon, last)
    items = [(score, task_id) for task_id, score in best.items()]
    items = [it for it in items if (after is None or it < after) and (not horizon or it >= horizon)]
    return sorted(items, reverse=True), horizon


def search_tasks(
    queues: list[str],
    state: str | Sequence[str] | None = None,
    limit: int = 50,
    cursor: str | None = None,
    *,
    name: str | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
    entered_after: float | None = None,
    where: Callable[[dict[str, Any]], bool] | None = None,
) -> TaskSearch:
    """Return one page of the queues' tasks, newest first, matching the filters.

    The creation filters (epoch seconds) are read from the task ids and cost nothing, and
    entered_after (the task entered its state after it) bounds the index reads; the name
    filter and `where` (a check of the decoded record, see records.query) read records, at
    most as many as the budget pays for, so a page can be short, even empty, and still have a
    next cursor.
    """
    _check_limit(limit)
    if not queues:
        return {"tasks": [], "next_cursor": None, "partial": False, "scanned": 0, "queues_read": 0}
    for queue in queues:
        check_queue_name(queue)
    after = parse_cursor(cursor) if cursor else None
    if isinstance(state, str):
        state = [state]
    states = [TaskState(s) for s in state] if state else list(STATE_ORDER)
    budget = current()
    per_queue = len(states) * (1 if after is None else 2)
    # At most half of what is left goes to the indexes; the records need the rest.
    fit = max(budget.left // 2 // per_queue, 1)
    read = queues[:fit]
    keys = _keys()
    indexes = [keys.index(q, s) for q in read for s in states]
    filtered = name is not None or where is not None or created_after is not None
    filtered = filtered or created_before is not None
    room = budget.left - per_queue * len(read)  # what the records may cost
    depth = 1 + max(min(MAX_PAGE if filtered else limit, room, MAX_CANDIDATES // len(indexes)), 1)
    # Tasks enter a state after they are created: older index entries cannot match.
    lows = [t for t in (created_after, entered_after) if t is not None]
    low = str(int(max(lows) * 1000)) if lows else "-inf"
    items, horizon = _candidates(indexes, after, depth, low, budget)

    def id_ok(item: Item) -> bool:
        created = ids.created_ms(item[1]) / 1000
        if created_after is not None and created < created_after:
            return False
        return created_before is None or created < created_before

    def record_ok(record: dict[str, Any]) -> bool:
        if name is not None and record.get("name") != name:
            return False
        return where is None or where(decode_record(record))

    picky = name is not None or where is not None
    found, last, scanned, pos = _examine(items, limit, id_ok, record_ok, picky, budget)
    if pos < len(items) and last is None:  # not even one record fitted: no page, no progress
        raise ReadBudgetExceeded(budget.limit, budget.spent + 1)
    more = pos < len(items) or horizon is not None
    next_cursor = f"{last[0]}:{last[1]}" if more and last is not None else None
    partial = len(read) < len(queues) or (len(found) < limit and next_cursor is not None)
    if partial:
        budget.partial = True
    return {
        "tasks": found,
        "next_cursor": next_cursor,
        "partial": partial,
        "scanned": scanned,
        "queues_read": len(read),
    }


def _examine(
    items: list[Item],
    limit: int,
    id_ok: Callable[[Item], bool],
    record_ok: Callable[[dict[str, Any]], bool],
    picky: bool,
    budget: Budget,
) -> tuple[list[dict[str, Any]], Item | None, int, int]:
    """Read records of items in order until `limit` match or the budget ends.

    Return (matching records, last item examined, records read, items examined).
    """
    found: list[dict[str, Any]] = []
    last: Item | None = None
    scanned = pos = 0
    while pos < len(items) and len(found) < limit and budget.left > 0:
        need = limit - len(found)
        size = min(budget.left, max(need, SCAN_CHUNK) if picky else need)
        chunk: list[int] = []
        end = pos
        while end < len(items) and len(chunk) < size:
            if id_ok(items[end]):
                chunk.append(end)
            end += 1
        pipe = get_client().pipeline(transaction=False)
        for i in chunk:
            task_id = items[i][1]
            pipe.hgetall(keys_for(task_id).task(task_id))
        raws = dict(zip(chunk, execute(pipe, budget), strict=True)) if chunk else {}
        scanned += len(chunk)
        for i in range(pos, end):
            pos, last = i + 1, items[i]
            raw = raws.get(i)
            if raw and record_ok(raw):
                found.append(decode_record(raw))  # records that expired meanwhile are skipped
                if len(found) >= limit:
                    break
    return found, last, scanned, pos


def _entry_key(entry: DlqEntry) -> tuple[int, int, str]:
    millis, _, seq = entry["entry_id"].partition("-")
    return int(millis), int(seq or 0), entry["queue"]


def _dlq_cursor(entry: DlqEntry) -> str:
    return f"{entry['entry_id']}:{entry['queue']}"


def _dlq_after(before: str | None) -> tuple[str, tuple[int, int, str] | None]:
    """Return (XREVRANGE top, key to page below) of a cursor '<entry id>[:<queue>]'.

    Entry ids are unique per stream only: two queues' DLQs can hold the same id, so the
    cursor names its queue too and the next page starts at that id, below that queue.
    """
    if not before:
        return "+", None
    entry_id, _, queue = before.partition(":")
    check_entry_id(entry_id)
    if not queue:
        return f"({entry_id}", None
    check_queue_name(queue)
    millis, _, seq = entry_id.partition("-")
    return entry_id, (int(millis), int(seq or 0), queue)


def search_dlq(queues: list[str], limit: int = 50, before: str | None = None) -> DlqSearch:
    """Return DLQ entries newest first over the queues, below the cursor `before`."""
    _check_limit(limit)
    for queue in queues:
        check_queue_name(queue)
    top, after = _dlq_after(before)
    budget = current()
    keys = _keys()
    client = get_client()
    read = queues[: max(budget.left // 2, 1)]
    pipe = client.pipeline(transaction=False)
    for queue in read:
        pipe.xlen(keys.dlq(queue))
    sizes = [int(n) for n in execute(pipe, budget)] if read else []
    busy = [q for q, n in zip(read, sizes, strict=True) if n][: max(budget.left, 1)]
    depth = max(min(limit, MAX_DLQ_ROWS // max(len(busy), 1)), 1) + 1
    pipe = client.pipeline(transaction=False)
    for queue in busy:
        pipe.xrevrange(keys.dlq(queue), top, "-", count=depth)
    entries: list[DlqEntry] = []
    horizon: tuple[int, int, str] | None = None
    for queue, rows in zip(busy, execute(pipe, budget) if busy else [], strict=True):
        decoded = [decode_dlq_entry(queue, eid, fields) for eid, fields in rows]
        entries += [e for e in decoded if after is None or _entry_key(e) < after]
        if len(rows) >= depth:
            cut = _entry_key(decoded[-1])
            horizon = cut if horizon is None else max(horizon, cut)
    entries = sorted(
        (e for e in entries if horizon is None or _entry_key(e) >= horizon),
        key=_entry_key,
        reverse=True,
    )
    more = len(entries) > limit or horizon is not None
    entries = entries[:limit]
    partial = len(read) < len(queues) or len(busy) < sum(1 for n in sizes if n)
    if partial:
        budget.partial = True
    return {
        "entries": entries,
        "next_cursor": _dlq_cursor(entries[-1]) if more and entries else None,
        "total": sum(sizes),
        "partial": partial,
        "queues_read": len(read),
    }
