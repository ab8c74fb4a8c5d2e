"""Retry FAILED tasks (ended without a DLQ entry): find them, then one retry_failed.lua call.

A task ends FAILED instead of DEAD_LETTERED when DLQ_ENABLED is off; with no DLQ entry to
replay, the record itself is put back on a queue. The record's finished_at, read just before
the call, is the script's fence: a resent call is answered without a second run.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtq.conf import dtq_settings
from dtq.engine import gateway, ids, layout
from dtq.engine.connection import get_client
from dtq.engine.keys import Keys

RETRY_OK = ("retried",)


@dataclass(frozen=True, slots=True)
class FailedTask:
    """A FAILED task as retry_failed.lua needs it."""

    id: str
    queue: str
    finished_at: str  # the record's field as stored: the fence naming this failure
    idem: str = ""


def _keys() -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, 0)


def find(task_ids: list[str]) -> list[FailedTask]:
    """Return the tasks among task_ids that are FAILED now (one pipelined read)."""
    valid = [t for t in task_ids if ids.is_valid(t)]
    pipe = get_client().pipeline(transaction=False)
    for task_id in valid:
        pipe.hmget(_keys().task(task_id), "state", "queue", "finished_at", "idem")
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
    """
    if not tasks:
        return []
    refs = [layout.TaskRef(t.id, queue, t.idem) for t in tasks]
    fences = [t.finished_at for t in tasks]
    edits = edits if edits is not None else [""] * len(tasks)
    return gateway.retry_failed(
        get_client(), _keys(), queue, to_queue or queue, refs, fences, edits
    )
