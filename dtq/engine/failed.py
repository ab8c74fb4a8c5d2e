"""Retry FAILED tasks (ended without a DLQ entry): find them, then one retry_failed.lua call.

A task ends FAILED instead of DEAD_LETTERED when DLQ_ENABLED is off; with no DLQ entry to
replay, the record itself is put back on a queue. The record's finished_at, read just before
the call, is the script's fence: a resent call is answered without a second run.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtq.engine import gateway, ids, layout, shards
from dtq.engine.read_side.shard_pipe import ShardPipeline

RETRY_OK = ("retried",)


@dataclass(frozen=True, slots=True)
class FailedTask:
    """A FAILED task as retry_failed.lua needs it."""

    id: str
    queue: str
    finished_at: str  # the record's field as stored: the fence naming this failure
    idem: str = ""


def find(task_ids: list[str]) -> list[FailedTask]:
    """Return the tasks among task_ids that are FAILED now (one pipelined read)."""
    valid = [t for t in task_ids if ids.is_valid(t)]
    pipe = ShardPipeline()  # each record in its task's shard
    for task_id in valid:
        keys = shards.of_task(task_id)
        pipe.on(keys.shard).hmget(keys.task(task_id), "state", "queue", "finished_at", "idem")
    found = []
    for task_id, (state, queue, finished_at, idem) in zip(valid, pipe.execute(), strict=True):
        if state == "FAILED" and queue and finished_at:
            found.append(FailedTask(task_id, queue, finished_at, idem or ""))
    return found


def retry(
    queue: str, tasks: list[FailedTask], to_queue: str | None = None, edits: list[str] | None = None
) -> list[str]:
    """Put FAILED tasks of one queue back on to_queue (default: the same); one status each.

    `edits`, one per task ('' for none), are the script's JSON edits of payload and priority.
    A task is retried in its own shard: one script call per shard the tasks are in.
    """
    edits = edits if edits is not None else [""] * len(tasks)
    by_shard: dict[int, list[int]] = {}
    for i, task in enumerate(tasks):
        by_shard.setdefault(ids.shard_of(task.id), []).append(i)
    replies: dict[int, str] = {}
    for shard, places in by_shard.items():
        chosen = [tasks[i] for i in places]
        answers = gateway.retry_failed(
            shards.client(shard),
            shards.keys(shard),
            queue,
            to_queue or queue,
            [layout.TaskRef(t.id, queue, t.idem) for t in chosen],
            [t.finished_at for t in chosen],
            [edits[i] for i in places],
        )
        replies.update(zip(places, answers, strict=True))
    return [replies[i] for i in range(len(tasks))]
