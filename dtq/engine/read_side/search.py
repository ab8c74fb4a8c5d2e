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

from dtq.engine import cursors, ids, shards
from dtq.engine.errors import ReadBudgetExceeded
from dtq.engine.keys import check_queue_name
from dtq.engine.layout import STATE_ORDER
from dtq.engine.read_side.budget import Budget, current, execute
from dtq.engine.read_side.dlq import (
    DlqEntry,
    decode_dlq_entry,
    entry_cursor,
    parse_entry_cursor,
)
from dtq.engine.read_side.shard_pipe import ShardPipeline
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


def parse_cursor(cursor: str) -> Item:
    """Return the (score, id) of a task list cursor, or raise ValueError."""
    return cursors.task_cursor(cursor)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be in 1..{MAX_PAGE}, got {limit}")


def _candidates(
    indexes: list[tuple[int, str]], after: Item | None, depth: int, low: str, budget: Budget
) -> tuple[list[Item], Item | None]:
    """Return the merged (score, id) items below `after`, newest first, and the horizon.

    `indexes` are (shard, index key): every shard's index of a queue and state is one list
    of the merge, as every queue's is.
    """
    pipe = ShardPipeline()
    for shard, index in indexes:
        if after is not None:
            # Several tasks can enter a state in the same millisecond (one script, one NOW):
            # take every tie at the cursor's score, then a bounded range strictly below it.
            pipe.on(shard).zrevrangebyscore(index, after[0], after[0], withscores=True)
        top = "+inf" if after is None else f"({after[0]}"
        pipe.on(shard).zrevrangebyscore(index, top, low, start=0, num=depth, withscores=True)
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
    # Every shard holds its part of each index: a queue costs that many lists per shard.
    per_queue = len(states) * (1 if after is None else 2) * shards.count()
    # At most half of what is left goes to the indexes; the records need the rest.
    fit = max(budget.left // 2 // per_queue, 1)
    read = queues[:fit]
    every = shards.every()
    indexes = [(k.shard, k.index(q, s)) for q in read for s in states for k in every]
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
        pipe = ShardPipeline()
        for i in chunk:
            task_id = items[i][1]
            keys = keys_for(task_id)
            pipe.on(keys.shard).hgetall(keys.task(task_id))
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


EntryKey = tuple[int, int, str, int]  # (ms, seq, queue, shard): the order of DLQ pages


def _entry_key(entry: DlqEntry, shard: int) -> EntryKey:
    millis, _, seq = entry["entry_id"].partition("-")
    return int(millis), int(seq or 0), entry["queue"], shard


def _dlq_cursor(entry: DlqEntry, shard: int) -> str:
    return f"{entry_cursor(entry['entry_id'], shard)}:{entry['queue']}"


def _dlq_after(before: str | None) -> tuple[str, EntryKey | None]:
    """Return (XREVRANGE top, key to page below) of a cursor '<entry id>[@<shard>][:<queue>]'.

    Entry ids are unique per stream only: two queues' DLQs (or two shards' DLQs of a queue)
    can hold the same id, so the cursor names its queue and shard too and the next page
    starts at that id, below that queue and shard.
    """
    if not before:
        return "+", None
    position, _, queue = before.partition(":")
    entry_id, shard = parse_entry_cursor(position)
    if not queue:
        return f"({entry_id}", None
    check_queue_name(queue)
    millis, _, seq = entry_id.partition("-")
    return entry_id, (int(millis), int(seq or 0), queue, shard)


def search_dlq(queues: list[str], limit: int = 50, before: str | None = None) -> DlqSearch:
    """Return DLQ entries newest first over the queues, below the cursor `before`."""
    _check_limit(limit)
    for queue in queues:
        check_queue_name(queue)
    top, after = _dlq_after(before)
    budget = current()
    every = shards.every()
    read = queues[: max(budget.left // 2 // len(every), 1)]
    streams = [(q, k.shard, k.dlq(q)) for q in read for k in every]  # each DLQ of each shard
    pipe = ShardPipeline()
    for _, shard, stream in streams:
        pipe.on(shard).xlen(stream)
    sizes = [int(n) for n in execute(pipe, budget)] if streams else []
    busy = [s for s, n in zip(streams, sizes, strict=True) if n][: max(budget.left, 1)]
    depth = max(min(limit, MAX_DLQ_ROWS // max(len(busy), 1)), 1) + 1
    pipe = ShardPipeline()
    for _, shard, stream in busy:
        pipe.on(shard).xrevrange(stream, top, "-", count=depth)
    found: list[tuple[EntryKey, DlqEntry]] = []
    horizon: EntryKey | None = None
    for (queue, shard, _), rows in zip(busy, execute(pipe, budget) if busy else [], strict=True):
        decoded = [decode_dlq_entry(queue, eid, fields) for eid, fields in rows]
        keyed = [(_entry_key(e, shard), e) for e in decoded]
        found += [(k, e) for k, e in keyed if after is None or k < after]
        if len(rows) >= depth:
            cut = keyed[-1][0]
            horizon = cut if horizon is None else max(horizon, cut)
    found = sorted(
        (item for item in found if horizon is None or item[0] >= horizon),
        key=lambda item: item[0],
        reverse=True,
    )
    more = len(found) > limit or horizon is not None
    found = found[:limit]
    partial = len(read) < len(queues) or len(busy) < sum(1 for n in sizes if n)
    if partial:
        budget.partial = True
    last = found[-1] if found else None
    return {
        "entries": [e for _, e in found],
        "next_cursor": _dlq_cursor(last[1], last[0][3]) if more and last else None,
        "total": sum(sizes),
        "partial": partial,
        "queues_read": len(read),
    }
