"""DLQ actions behind ops.py: replay and discard entries, one script call per bounded batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import gateway, ids, layout, read_side, shards
from dtq.engine.read_side import DlqEntry

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
    next_cursor: str | None = None  # with more: the last entry taken; continue after it

    def add(self, entries: list[DlqEntry], replies: list[str], ok: tuple[str, ...]) -> None:
        """Count one batch's replies."""
        self.taken += len(entries)
        self.next_cursor = entries[-1]["entry_id"] if entries else self.next_cursor
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


def replay_entries(
    queue: str,
    entries: list[DlqEntry],
    to_queue: str | None = None,
    edits: list[str] | None = None,
) -> list[str]:
    """Replay entries of one queue's DLQ onto to_queue (default: the same queue).

    `edits`, one per entry ('' for none), are replay.lua's JSON edits of payload and priority.
    An entry is replayed in its task's shard (one call per shard); replies keep entries' order.
    """
    replies = ["stale"] * len(entries)
    for shard, positions in _by_shard(entries, usable_only=True).items():
        part = [entries[p] for p in positions]
        done = gateway.replay(
            shards.client(shard),
            shards.keys(shard),
            queue,
            to_queue or queue,
            _refs(queue, part),
            dtq_settings.DEFAULT_MAX_ATTEMPTS,
            [e["entry_id"] for e in part],
            None if edits is None else [edits[p] for p in positions],
        )
        for position, reply in zip(positions, done, strict=True):
            replies[position] = reply
    return replies


def discard_entries(queue: str, entries: list[DlqEntry], reason: str) -> list[str]:
    """Delete entries from one queue's DLQ, releasing their tasks' idempotency keys."""
    replies = [""] * len(entries)
    for shard, positions in _by_shard(entries, usable_only=False).items():
        part = [entries[p] for p in positions]
        entry_ids = [e["entry_id"] for e in part]
        keys = shards.keys(shard)
        done = gateway.discard(
            shards.client(shard), keys, queue, _refs(queue, part), reason, entry_ids
        )
        for position, reply in zip(positions, done, strict=True):
            replies[position] = reply
    return replies


def _by_shard(entries: list[DlqEntry], *, usable_only: bool) -> dict[int, list[int]]:
    """Group entries' positions by their task's shard (where the DLQ entry lives).

    An entry without a valid task id goes to HOME (replay leaves it out: it cannot be rebuilt).
    """
    groups: dict[int, list[int]] = {}
    for position, entry in enumerate(entries):
        valid = ids.is_valid(entry["task_id"])
        if valid or not usable_only:
            shard = ids.shard_of(entry["task_id"]) if valid else shards.HOME
            groups.setdefault(shard, []).append(position)
    return groups


def trim(queue: str, cutoff_ms: int, batch: int = TRIM_BATCH, *, shard: int = shards.HOME) -> int:
    """Remove a queue's DLQ entries older than cutoff_ms in one shard (and their index entries)."""
    keys, client = shards.keys(shard), shards.client(shard)
    removed = 0
    while True:  # ends: no entry older than the cutoff is ever added
        count = gateway.dlq_trim(client, keys, queue, cutoff_ms, batch)
        removed += count
        if count < batch:
            return removed


def matching_batches(
    queue: str, flt: DlqFilter, batch: int = BATCH, after: str = "-"
) -> Iterator[list[DlqEntry]]:
    """Yield the entries after `after` that match flt, oldest first, in batches.

    Only entries present when the iteration starts are considered, so a DLQ that keeps
    growing cannot keep a bulk action running.
    """
    upto = read_side.dlq_last_id(queue)
    if upto is None:
        return
    left = flt.limit
    while left is None or left > 0:
        page = read_side.dlq_scan(queue, after=after, upto=upto, count=max(batch, 1))
        if not page:
            return
        after = page[-1]["entry_id"]
        chosen = [e for e in page if flt.matches(e)][:left]
        if chosen:
            yield chosen
            left = None if left is None else left - len(chosen)


def bulk(
    queue: str,
    flt: DlqFilter,
    act: Callable[[list[DlqEntry]], list[str]],
    ok: tuple[str, ...],
    progress: DlqProgress | None = None,
    result: BulkResult | None = None,
    after: str = "-",
) -> BulkResult:
    """Apply act to every matching entry after `after`, batch by batch, counting into result.

    A caller that passes its own result still has the counts of the batches done when a
    later batch raises.
    """
    result = BulkResult() if result is None else result
    for entries in matching_batches(queue, flt, after=after):
        result.add(entries, act(entries), ok)
        if progress is not None:
            progress(result)
    result.more = flt.limit is not None and result.taken >= flt.limit
    if not result.more:
        result.next_cursor = None
    return result
