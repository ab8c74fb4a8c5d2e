"""Build each Lua script's KEYS (its layout) and the ARGV header all scripts share (lib.lua)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dtq.conf import dtq_settings
from dtq.engine.keys import BANDS, GROUP, Keys
from dtq.engine.protocol import STATE_ORDER

__all__ = ["FULL", "STATE_ORDER", "Layout", "TaskRef", "build", "of", "queue_index"]


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A task as a script needs it: its id, queue and idempotency key (if any)."""

    id: str
    queue: str
    idem: str = ""


STREAMS = ("stream0", "stream1", "stream2")  # one per priority band
# Flow control (lib.lua): limits (hash), held slots, waiting line, rate meters (zsets).
LIMIT_KEYS = ("limits", "held", "wait", "rate")
SHARED = ("schedule", "events", "queues", "paused", "throughput", "dlq_index", "template")
QUEUE = (
    *(str(state) for state in STATE_ORDER),
    "stats",
    "dlq",
    *STREAMS,
    *LIMIT_KEYS,
)
TASK = ("record", "result", "idem")
# The Lua constant that names each key's position (lib.lua reads KEYS through these).
SHARED_LUA = dict(
    zip(
        SHARED,
        ("K_SCHEDULE", "K_EVENTS", "K_QUEUES", "K_PAUSED", "K_TP", "K_DLQIX", "K_TEMPLATE"),
        strict=True,
    )
)
QUEUE_LUA = {
    "stats": "Q_STATS",
    "dlq": "Q_DLQ",
    "stream0": "Q_STREAM0",
    "limits": "Q_LIMITS",
    "held": "Q_HELD",
    "wait": "Q_WAIT",
    "rate": "Q_RATE",
}
TASK_LUA = {"record": "T_RECORD", "result": "T_RESULT", "idem": "T_IDEM"}


@dataclass(frozen=True, slots=True)
class Layout:
    """Which keys a script gets: shared, per queue and per task, each in this order.

    Every key costs Redis parsing and a Lua string per call, so a hot script gets only the
    keys it uses. A key left out is nil in the script's constants: using it is an error.
    """

    shared: tuple[str, ...] = SHARED
    queue: tuple[str, ...] = QUEUE
    task: tuple[str, ...] = TASK

    def __post_init__(self) -> None:
        streams = [k for k in self.queue if k.startswith("stream")]
        if streams and streams != [f"stream{b}" for b in BANDS]:
            raise ValueError("a layout has all three streams or none")
        if streams and self.queue.index("stream0") + 2 != self.queue.index("stream2"):
            raise ValueError("a layout's streams are adjacent, in band order")

    def lua(self) -> str:
        """Return the Lua constants of this layout (one paragraph; lib.lua's qkey and tkey)."""

        def pos(names: tuple[str, ...], name: str) -> str:
            return str(names.index(name) + 1) if name in names else "nil"

        shared = ", ".join(SHARED_LUA[k] for k in SHARED)
        shared_at = ", ".join(pos(self.shared, k) for k in SHARED)
        ix = ", ".join(
            f"{k} = {pos(self.queue, k)}" for k in QUEUE if k in self.queue and k in STATE_ORDER
        )
        task = ", ".join(TASK_LUA[k] for k in TASK)
        task_at = ", ".join(pos(self.task, k) for k in TASK)
        q_at = ", ".join(pos(self.queue, k) for k in QUEUE_LUA)
        return (
            f"local NSHARED, QB, TB = {len(self.shared)}, {len(self.queue)}, {len(self.task)}\n"
            f"local {shared} = {shared_at}\n"
            f"local {', '.join(QUEUE_LUA.values())} = {q_at}\n"
            f"local IX = {{{ix}}}  -- state -> its index key's place in a queue block\n"
            f"local {task} = {task_at}"
        )


FULL = Layout()
# claim's flow control (lib.lua's admit) parks a task over a rate as PENDING on the schedule
# and reads and writes all four limit keys.
CLAIM_QUEUE = (
    *("PENDING", "QUEUED", "RUNNING", "CANCELLED", "EXPIRED", "stats"),
    *STREAMS,
    *LIMIT_KEYS,
)
# The hot scripts' own layouts (tests/test_gateway.py checks each names every key it uses).
LAYOUTS = {
    "submit": Layout(
        shared=("schedule", "events", "queues", "throughput", "template"),
        queue=("PENDING", "QUEUED", "stats", *STREAMS),
        task=("record", "idem"),
    ),
    "read": Layout(shared=("paused",), queue=STREAMS, task=()),
    "claim": Layout(
        shared=("schedule", "events", "paused", "throughput"),
        queue=CLAIM_QUEUE,
        task=("record", "idem"),
    ),
    # take.lua reads and claims: claim's keys, its task keys built in the script (take.lua).
    "take": Layout(
        shared=("schedule", "events", "paused", "throughput"),
        queue=CLAIM_QUEUE,
        task=(),
    ),
    "finalize": Layout(
        shared=("schedule", "events", "throughput", "dlq_index"),
        queue=(
            "RUNNING",
            "RETRYING",
            "SUCCEEDED",
            "FAILED",
            "DEAD_LETTERED",
            "CANCELLED",
            "stats",
            "dlq",
            *STREAMS,
            # release() frees the attempt's slots and wakes waiters; the rate meters come
            # with the flow-control paragraph of lib.lua that finalize includes.
            *LIMIT_KEYS,
        ),
    ),
    # A held attempt's lease deadline is its score in its queue's RUNNING index.
    "renew": Layout(shared=(), queue=("RUNNING",), task=("record",)),
}


def of(script: str) -> Layout:
    """Return the layout of the named script (the full one unless it has its own)."""
    return LAYOUTS.get(script, FULL)


def shared_keys(keys: Keys, layout: Layout = FULL) -> list[str]:
    """Return the layout's shared keys, in its order."""
    return list(_shared_keys(keys, layout, int(time.time() // 60)))


@functools.lru_cache(maxsize=64)
def _shared_keys(keys: Keys, layout: Layout, minute: int) -> tuple[str, ...]:
    every = {
        "schedule": keys.schedule,
        "events": keys.events,
        "queues": keys.queues,
        "paused": keys.paused,
        "throughput": keys.throughput(minute),
        "dlq_index": keys.dlq_index,
        "template": keys.template,
    }
    return tuple(every[name] for name in layout.shared)


@functools.lru_cache(maxsize=4096)
def queue_block(keys: Keys, queue: str, layout: Layout = FULL) -> tuple[str, ...]:
    """Return the layout's keys of one queue, in its order (cached: the hot paths)."""
    flow = {
        "limits": keys.limits,
        "held": keys.limit_held,
        "wait": keys.limit_wait,
        "rate": keys.limit_rate,
    }
    block = []
    for name in layout.queue:
        if name == "stats":
            block.append(keys.stats(queue))
        elif name == "dlq":
            block.append(keys.dlq(queue))
        elif name.startswith("stream"):
            block.append(keys.stream(queue, int(name[-1])))
        elif name in flow:
            block.append(flow[name](queue))
        else:
            block.append(keys.index(queue, name))
    return tuple(block)


def task_block(keys: Keys, ref: TaskRef, layout: Layout = FULL) -> list[str]:
    """Return the layout's keys of one task; the record stands in when there is no key."""
    record = keys.task(ref.id)
    block = []
    for name in layout.task:  # only the keys the layout names: a bulk call has many tasks
        if name == "record" or (name == "idem" and not ref.idem):
            block.append(record)
        elif name == "idem":
            block.append(keys.idempotency(ref.queue, ref.idem))
        else:
            block.append(keys.result(ref.id))
    return block


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
    *,
    layout: Layout = FULL,
) -> tuple[list[str], list[str | int]]:
    """Return (KEYS, ARGV header) for a call over these queues, tasks and workflows."""
    task_list = list(tasks)
    key_list = shared_keys(keys, layout)
    for queue in queues:
        key_list += queue_block(keys, queue, layout)
    for ref in task_list:
        key_list += task_block(keys, ref, layout)
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
