"""DLQ actions behind ops.py: replay and discard entries, one script call per bounded batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import gateway, ids, layout, read_side, shards
from dtq.engine.read_side import DlqEntry
from dtq.engine.read_side.dlq import entry_cursor

BATCH = 100  # entries per script call: keeps each call short for everyone else on Redis
TRIM_BATCH = 500  # entries per retention call

DlqProgress = Callable[["BulkResult"], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class DlqFilter:
    """Which DLQ entries a bulk action takes; every condition that is set must hold."""

    name: str | None = None  # task name, exact
    error: str | None = None  # substring of the error class, e.g. "ValueError"
    since: float | None = None  # dead-lettered at or after (epoch seconds)
    until: float | None = None  # dead-lettered before (epoch seconds)
    limit: int | None = None  # at most this many entries

    def matches(self, entry: DlqEntry) -> bool:
        """Return True when the entry satisfies every condition that is set."""
        at = entry["dead_lettered_at"] or 0.0
        error = entry["error"] if isinstance(entry["error"], dict) else {}
        return (
            (self.name is None or entry["name"] == self.name)
            and (self.error is None or self.error in str(error.get("class", "")))
            and (self.since is None or at >= self.since)
            and (self.until is None or at < self.until)
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the conditions that are set (for the audit row)."""
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


@dataclass(slots=True)
class BulkResult:
    """Counts of a bulk DLQ action; `statuses` maps script replies to how often they came."""

    done: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    task_ids: list[str] = field(default_factory=list)  # of the entries acted on
    taken: int = 0  # entries acted on, whatever their status
    more: bool = False  # stopped at the filter's limit: matching entries may remain
    # With more: the last entry taken ('<entry id>[@<shard>]'); continue after it.
    next_cursor: str | None = None

    def add(
        self, entries: list[DlqEntry], replies: list[str], ok: tuple[str, ...], shard: int = 0
    ) -> None:
        """Count one batch's replies (entries of one shard's DLQ)."""
        self.taken += len(entries)
        if entries:
            self.next_cursor = entry_cursor(entries[-1]["entry_id"], shard)
        for entry, status in zip(entries, replies, strict=True):
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status in ok:
                self.done += 1
                self.task_ids.append(entry["task_id"])


def _refs(queue: str, entries: list[DlqEntry]) -> list[layout.TaskRef]:
    """Task refs for the entries; each entry carries its task's idempotency key.

    The record's key equals the entry's while the entry exists (only a replay, which removes
    the entry, changes it), and the scripts check the key still names the task.
    """
    return [layout.TaskRef(_task_id(entry), queue, entry["idempotency_key"]) for entry in entries]


def _task_id(entry: DlqEntry) -> str:
    # A damaged entry still needs some task block; the scripts find no record behind it.
    return entry["task_id"] if ids.is_valid(entry["task_id"]) else "0" * 22


# replay.lua's statuses of a replay that happened ('done': by an earlier send of the call).
REPLAYED = ("replayed", "recreated", "done")
DISCARDED = ("discarded", "done")  # discard.lua's statuses of a discard that happened


def _by_shard(entries: list[DlqEntry], shard: int | None) -> dict[int, list[int]]:
    """Return the positions of the entries per shard whose DLQ holds them.

    An entry is in its task's shard (the script that dead-lettered the task wrote it there);
    `shard`, when given, is the shard they were read from (a damaged entry names no task).
    """
    groups: dict[int, list[int]] = {}
    for i, entry in enumerate(entries):
        task_id = entry["task_id"]
        owner = (
            shard if shard is not None else ids.shard_of(task_id) if ids.is_valid(task_id) else 0
        )
        groups.setdefault(owner, []).append(i)
    return groups


def replay_entries(
    queue: str,
    entries: list[DlqEntry],
    to_queue: str | None = None,
    edits: list[str] | None = None,
    shard: int | None = None,
) -> list[str]:
    """Replay entries of one queue's DLQ onto to_queue (default: the same queue).

    `edits`, one per entry ('' for none), are replay.lua's JSON edits of payload and priority.
    A task is replayed in its own shard: one script call per shard the entries are in.
    """
    usable = [i for i, e in enumerate(entries) if ids.is_valid(e["task_id"])]
    replies = dict.fromkeys(range(len(entries)), "stale")
    for owner, places in _by_shard([entries[i] for i in usable], shard).items():
        chosen = [usable[p] for p in places]
        kept = None if edits is None else [edits[i] for i in chosen]
        answers = gateway.replay(
            shards.client(owner),
            shards.keys(owner),
            queue,
            to_queue or queue,
            _refs(queue, [entries[i] for i in chosen]),
            dtq_settings.DEFAULT_MAX_ATTEMPTS,
            [entries[i]["entry_id"] for i in chosen],
            kept,
        )
        replies.update(zip(chosen, answers, strict=True))
    return [replies[i] for i in range(len(entries))]


def discard_entries(
    queue: str, entries: list[DlqEntry], reason: str, shard: int | None = None
) -> list[str]:
    """Delete entries from one queue's DLQ, releasing their tasks' idempotency keys.

    One script call per shard the entries are in (`shard`: the one they were read from).
    """
    replies: dict[int, str] = {}
    for owner, places in _by_shard(entries, shard).items():
        chosen = [entries[i] for i in places]
        answers = gateway.discard(
            shards.client(owner),
            shards.keys(owner),
            queue,
            _refs(queue, chosen),
            reason,
            [e["entry_id"] for e in chosen],
        )
        replies.update(zip(places, answers, strict=True))
    return [replies[i] for i in range(len(entries))]


def trim(queue: str, cutoff_ms: int, batch: int = TRIM_BATCH, shard: int | None = None) -> int:
    """Remove a shard's (None: every shard's) DLQ entries of queue older than cutoff_ms, and
    their index entries; count them."""
    removed = 0
    for keys in shards.every() if shard is None else [shards.keys(shard)]:
        client = shards.client(keys.shard)
        while True:  # ends: no entry older than the cutoff is ever added
            count = gateway.dlq_trim(client, keys, queue, cutoff_ms, batch)
            removed += count
            if count < batch:
                break
    return removed


def matching_batches(
    queue: str, flt: DlqFilter, batch: int = BATCH, after: str = "-"
) -> Iterator[tuple[int, list[DlqEntry]]]:
    """Yield (shard, entries) after the cursor `after` that match flt, in batches.

    Shard by shard, each shard's entries oldest first; `after` is '-' or a cursor
    '<entry id>[@<shard>]' (BulkResult.next_cursor): the shards before it are done. Only
    entries present when a shard's iteration starts are considered, so a DLQ that keeps
    growing cannot keep a bulk action running.
    """
    first, start = ("-", 0) if after == "-" else read_side.parse_entry_cursor(after)
    left = flt.limit
    for shard in range(start, shards.count()):
        cursor = first if shard == start else "-"
        upto = read_side.dlq_last_id(queue, shard)
        while upto is not None and (left is None or left > 0):
            page = read_side.dlq_scan(queue, cursor, upto, max(batch, 1), shard)
            if not page:
                break
            cursor = page[-1]["entry_id"]
            chosen = [e for e in page if flt.matches(e)][:left]
            if chosen:
                yield shard, chosen
                left = None if left is None else left - len(chosen)


def bulk(
    queue: str,
    flt: DlqFilter,
    act: Callable[[list[DlqEntry], int], list[str]],
    ok: tuple[str, ...],
    progress: DlqProgress | None = None,
    result: BulkResult | None = None,
    after: str = "-",
) -> BulkResult:
    """Apply act(entries, shard) to every matching entry after `after`, batch by batch,
    counting into result.

    A caller that passes its own result still has the counts of the batches done when a
    later batch raises (a bulk action over shards that fails part way has done the shards
    before the failing batch; its result's cursor says where to continue).
    """
    result = BulkResult() if result is None else result
    for shard, entries in matching_batches(queue, flt, after=after):
        result.add(entries, act(entries, shard), ok, shard)
        if progress is not None:
            progress(result)
    result.more = flt.limit is not None and result.taken >= flt.limit
    if not result.more:
        result.next_cursor = None
    return result
