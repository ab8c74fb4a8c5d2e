"""Queue purge behind ops.py: count first, then cancel waiting tasks in bounded batches.

A queue has a part on every shard: a purge goes through them in order, shard 0 first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dtq.engine import gateway, ids, layout, shards
from dtq.engine.keys import BANDS
from dtq.engine.read_side.shard_pipe import ShardPipeline
from dtq.engine.state import TaskState

BATCH = 200  # tasks per script call: one call never blocks Redis for long
WAITING = (TaskState.PENDING, TaskState.RETRYING, TaskState.QUEUED)


@dataclass(frozen=True, slots=True)
class PurgePreview:
    """What a purge of a queue would take now (a dry run), and what it leaves alone."""

    queued: int
    scheduled: int  # PENDING and RETRYING: members of the schedule
    running: int  # never purged: cancel them one by one

    @property
    def total(self) -> int:
        return self.queued + self.scheduled


@dataclass(slots=True)
class PurgeResult:
    """Counts of a purge so far; `running` is what it left alone."""

    queued: int = 0
    scheduled: int = 0
    released_keys: int = 0
    entries_removed: int = 0  # stale entries that were no task's current delivery
    skipped: int = 0
    running: int = 0
    batches: int = 0
    taken: int = 0  # items sent to the script (tasks and entries)
    more: bool = False  # stopped at its limit: waiting tasks may remain
    cutoff_ms: int = 0  # tasks created up to this millisecond are the purge's

    @property
    def purged(self) -> int:
        return self.queued + self.scheduled

    @property
    def next_cursor(self) -> str | None:
        """With more: the cursor that continues this purge (its cutoff), else None."""
        return str(self.cutoff_ms) if self.more else None

    def add(self, reply: Sequence[int]) -> None:
        """Count one batch's reply {queued, scheduled, released, removed, skipped}."""
        self.queued += int(reply[0])
        self.scheduled += int(reply[1])
        self.released_keys += int(reply[2])
        self.entries_removed += int(reply[3])
        self.skipped += int(reply[4])
        self.batches += 1


PurgeProgress = Callable[[PurgeResult], None]


def preview(queue: str) -> PurgePreview:
    """Count the tasks a purge of queue would cancel now, and the running ones it would not."""
    states = (*WAITING, TaskState.RUNNING)
    pipe = ShardPipeline()
    for keys in shards.every():
        for state in states:
            pipe.on(keys.shard).zcard(keys.index(queue, state))
    replies = [int(n) for n in pipe.execute()]
    pending, retrying, queued, running = (sum(replies[i :: len(states)]) for i in range(4))
    return PurgePreview(queued, pending + retrying, running)


class Purge:
    """One purge of one queue: state indexes first, then a sweep of the streams."""

    def __init__(
        self,
        queue: str,
        reason: str,
        progress: PurgeProgress | None = None,
        *,
        limit: int | None = None,
        cutoff_ms: int | None = None,
    ) -> None:
        self.queue = queue
        self.reason = reason
        self.progress = progress
        self.limit = limit  # at most this many items per run; None = all
        self.keys = shards.keys(0)  # the shard being purged (run() goes through every one)
        self.client: Any = shards.client(0)  # decode_responses: replies are str
        self.result = PurgeResult()
        if cutoff_ms is not None:  # a purge continued: same tasks as its first part
            self.result.cutoff_ms = cutoff_ms
            return
        # Tasks created after this millisecond are not purged (ids carry their creation time);
        # let it pass first so that no task created from here on shares it.
        self.result.cutoff_ms = int(time.time() * 1000)
        while int(time.time() * 1000) <= self.result.cutoff_ms:
            time.sleep(0.0005)

    @property
    def cutoff_ms(self) -> int:
        return self.result.cutoff_ms

    def run(self) -> PurgeResult:
        """Purge the waiting tasks created up to the cutoff (up to limit); return the counts."""
        for keys in shards.every():
            self.keys, self.client = keys, shards.client(keys.shard)
            for state in WAITING:  # scheduled first: a task promoted meanwhile is still caught
                self._purge_index(state)
            for band in BANDS:
                self._sweep_stream(band)
        self.result.running = preview(self.queue).running
        return self.result

    def _room(self) -> int:
        """Return how many more items this run may send (a large number without a limit)."""
        if self.limit is None:
            return BATCH
        left = self.limit - self.result.taken
        self.result.more = self.result.more or left <= 0
        return max(left, 0)

    def _old(self, task_id: str) -> bool:
        return not ids.is_valid(task_id) or ids.created_ms(task_id) <= self.cutoff_ms

    def _purge_index(self, state: TaskState) -> None:
        index = self.keys.index(self.queue, state)
        now_ms = int(time.time() * 1000) + 1000  # index scores come from the server's clock
        offset = 0  # members created after the cutoff stay in the index: page past them
        seen: set[str] = set()
        while self._room():
            members = self.client.zrangebyscore(index, "-inf", now_ms, start=offset, num=BATCH)
            chosen = [m for m in members if self._old(m)][: self._room()]
            if not members or (chosen and seen.issuperset(chosen)):
                return  # done (the second test only guards against a script that stalls)
            seen.update(chosen)
            offset += len(members) - len(chosen)
            if chosen:
                self._call([(state.value, m, "", "") for m in chosen], self._idems(chosen))

    def _sweep_stream(self, band: int) -> None:
        stream = self.keys.stream(self.queue, band)
        top = self.client.xrevrange(stream, "+", "-", count=1)
        if not top:
            return
        low, upto = "-", top[0][0]
        while self._room():
            rows = self.client.xrange(stream, low, upto, count=min(BATCH, self._room()))
            if not rows:
                return
            low = f"({rows[-1][0]}"
            # Each entry names its task's idempotency key ('i'): no record to read first.
            chosen = [(eid, f) for eid, f in rows if self._old(f.get("t") or "")]
            if chosen:
                items = [("entry", f.get("t") or "", str(band), eid) for eid, f in chosen]
                self._call(items, [f.get("i") or "" for _, f in chosen])

    def _idems(self, task_ids: list[str]) -> list[str]:
        """Read the idempotency keys of tasks known from an index only (the call declares them)."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self.keys.task(_safe(task_id)), "idem")
        return [idem or "" for idem in pipe.execute()]

    def _call(self, items: list[tuple[str, str, str, str]], idems: list[str]) -> None:
        refs = [
            layout.TaskRef(_safe(task_id), self.queue, idem)
            for (_, task_id, _, _), idem in zip(items, idems, strict=True)
        ]
        self.result.add(gateway.purge(self.client, self.keys, self.queue, refs, self.reason, items))
        self.result.taken += len(items)
        if self.progress is not None:
            self.progress(self.result)


def _safe(task_id: str) -> str:
    # An entry without a valid task id still needs a task block; the script finds no record.
    return task_id if ids.is_valid(task_id) else "0" * 22
