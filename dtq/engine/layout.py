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
    """Return the fourteen keys of one queue, in lib.lua order (cached: the hot paths)."""
    block = [keys.index(queue, state) for state in STATE_ORDER]
    block += [keys.stats(queue), keys.dlq(queue)]
    block += [keys.stream(queue, band) for band in BANDS]
    return tuple(block)


def task_block(keys: Keys, ref: TaskRef) -> list[str]:
    """Return the three keys of one task; the record stands in when there is no key."""
    idem = keys.idempotency(ref.queue, ref.idem) if ref.idem else keys.task(ref.id)
    return [keys.task(ref.id), keys.result(ref.id), idem]


def build(
    keys: Keys, queues: Sequence[str], tasks: Iterable[TaskRef] = ()
) -> tuple[list[str], list[str | int]]:
    """Return (KEYS, ARGV header) for a call over these queues and tasks."""
    task_list = list(tasks)
    key_list = shared_keys(keys)
    for queue in queues:
        key_list += queue_block(keys, queue)
    for ref in task_list:
        key_list += task_block(keys, ref)
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
