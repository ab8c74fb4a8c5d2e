"""Build the KEYS and ARGV header shared by every Lua script (see lua/lib.lua)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dtq.conf import dtq_settings
from dtq.engine.keys import BANDS, GROUP, Keys
from dtq.engine.protocol import STATE_ORDER

__all__ = ["STATE_ORDER", "TaskRef", "build", "queue_index"]


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A task as a script needs it: its id, queue and idempotency key (if any)."""

    id: str
    queue: str
    idem: str = ""


def shared_keys(keys: Keys) -> list[str]:
    """Return the seven shared keys, in lib.lua order."""
    return list(_shared_keys(keys, int(time.time() // 60)))


@functools.lru_cache(maxsize=64)
def _shared_keys(keys: Keys, minute: int) -> tuple[str, ...]:
    return (
        keys.schedule,
        keys.running,
        keys.events,
        keys.queues,
        keys.paused,
        keys.throughput(minute),
        keys.dlq_index,
    )


@functools.lru_cache(maxsize=4096)
def queue_block(keys: Keys, queue: str) -> tuple[str, ...]:
    """Return the eighteen keys of one queue, in lib.lua order (cached: the hot paths)."""
    block = [keys.index(queue, state) for state in STATE_ORDER]
    block += [keys.stats(queue), keys.dlq(queue)]
    block += [keys.stream(queue, band) for band in BANDS]
    block += [
        keys.limits(queue),
        keys.limit_held(queue),
        keys.limit_wait(queue),
        keys.limit_rate(queue),
    ]
    return tuple(block)


def task_block(keys: Keys, ref: TaskRef) -> list[str]:
    """Return the three keys of one task; the record stands in when there is no key."""
    idem = keys.idempotency(ref.queue, ref.idem) if ref.idem else keys.task(ref.id)
    return [keys.task(ref.id), keys.result(ref.id), idem]


def workflow_block(keys: Keys, workflow_id: str) -> list[str]:
    """Return the three keys of one workflow, in lib.lua order (after every task block)."""
    return [keys.workflow(workflow_id), keys.workflow_ready(workflow_id), keys.workflows_due]


def workflow_trailer(
    workflows: Sequence[str], per_task: Sequence[tuple[str, int]]
) -> list[str | int]:
    """Return the ARGV trailer lib.lua's wf_args reads: the workflows, then each task's place.

    per_task gives each task block's (workflow id, member index); ('', 0) outside any workflow.
    """
    if not workflows:
        return [0]
    places = [
        field for w, m in per_task for field in ((workflows.index(w) + 1, m) if w else (0, 0))
    ]
    return [len(workflows), *workflows, *places]


def build(
    keys: Keys,
    queues: Sequence[str],
    tasks: Iterable[TaskRef] = (),
    workflows: Sequence[str] = (),
) -> tuple[list[str], list[str | int]]:
    """Return (KEYS, ARGV header) for a call over these queues, tasks and workflows."""
    task_list = list(tasks)
    key_list = shared_keys(keys)
    for queue in queues:
        key_list += queue_block(keys, queue)
    for ref in task_list:
        key_list += task_block(keys, ref)
    for workflow_id in workflows:
        key_list += workflow_block(keys, workflow_id)
    s = dtq_settings
    header: list[str | int] = [
        len(queues),
        len(task_list),
        s.EVENT_STREAM_MAXLEN,
        s.RETENTION,
        s.RESULT_TTL,
        s.IDEMPOTENCY_TTL,
        GROUP,
        *queues,
    ]
    return key_list, header


def queue_index(queues: list[str], queue: str) -> int:
    """Return the 1-based block index of queue, appending it when new."""
    if queue not in queues:
        queues.append(queue)
    return queues.index(queue) + 1
