"""Retry FAILED tasks (ended without a DLQ entry): find them, then one retry_failed.lua call.

A task ends FAILED instead of DEAD_LETTERED when DLQ_ENABLED is off; with no DLQ entry to
replay, the record itself is put back on a queue. The record's finished_at, read just before
the call, is the script's fence: a resent call is answered without a second run.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtq.engine import gateway, ids, layout, shards

RETRY_OK = ("retried",)


@dataclass(frozen=True, slots=True)
class FailedTask:
    """A FAILED task as retry_failed.lua needs it."""

    id: str
    queue: str
    finished_at: str  # the record's field as stored: the fence naming this failure
    idem: str = ""


def find(task_ids: list[str]) -> list[FailedTask]:
    """Return the tasks among task_ids that are FAILED now (one pipelined read per shard)."""
    by_shard: dict[int, list[str]] = {}
    for task_id in task_ids:
        if ids.is_valid(task_id):
            by_shard.setdefault(ids.shard_of(task_id), []).append(task_id)
    found = []
    for shard, shard_ids in by_shard.items():
        keys = shards.keys(shard)
        pipe = shards.client(shard).pipeline(transaction=False)
        for task_id in shard_ids:
            pipe.hmget(keys.task(task_id), "state", "queue", "finished_at", "idem")
        for task_id, row in zip(shard_ids, pipe.execute(), strict=True):
            state, queue, finished_at, idem = row
            if state == "FAILED" and queue and finished_at:
                found.append(FailedTask(task_id, queue, finished_at, idem or ""))
    return found


def retry(
    queue: str, tasks: list[FailedTask], to_queue: str | None = None, edits: list[str] | None = None
) -> list[str]:
    """Put FAILED tasks of one queue back on to_queue (default: the same); one status each.

    `edits`, one per task ('' for none), are the script's JSON edits of payload and priority.
    A task is retried in its own shard: one call per shard, statuses in the order given.
    """
    edits = edits if edits is not None else [""] * len(tasks)
    by_shard: dict[int, list[int]] = {}
    for position, task in enumerate(tasks):
        by_shard.setdefault(ids.shard_of(task.id), []).append(position)
    statuses = [""] * len(tasks)
    for shard, positions in by_shard.items():
        refs = [layout.TaskRef(tasks[p].id, queue, tasks[p].idem) for p in positions]
        fences = [tasks[p].finished_at for p in positions]
        replies = gateway.retry_failed(
            shards.client(shard),
            shards.keys(shard),
            queue,
            to_queue or queue,
            refs,
            fences,
            [edits[p] for p in positions],
        )
        for position, status in zip(positions, replies, strict=True):
            statuses[position] = status
    return statuses
