"""The gateway between Python and the Lua scripts: one typed function per script.

The only engine code that knows a script's KEYS, ARGV and reply shape: callers pass and get
Python values. Every call goes through direct.py's one caller (one resend and NOSCRIPT policy).
Replies of several fields per item are declared once here (`Reply`), decoded by field name,
and built on the Lua side by a generated `reply_<name>(out, <fields in order>)`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dtq.conf import dtq_settings
from dtq.engine import codec, layout
from dtq.engine.connection import routed
from dtq.engine.direct import AsyncCaller, Calls, call_script, call_script_many
from dtq.engine.executor import Attempt, Outcome
from dtq.engine.keys import Keys
from dtq.engine.layout import TaskRef
from dtq.engine.scripts import script

Call = tuple[list[Any], list[Any]]  # (KEYS, ARGV) of one script call


@dataclass(frozen=True)
class Reply[T]:
    """A reply of `len(fields)` values per item: declared once, decoded by field name."""

    name: str
    fields: tuple[tuple[str, Callable[[Any], Any]], ...]
    make: Callable[..., T]

    def __post_init__(self) -> None:
        # Items are made positionally (a dict of keywords per item cost the worker's claim).
        leading = tuple(inspect.signature(self.make).parameters)[: len(self.fields)]
        if leading != self.names:
            raise TypeError(f"reply {self.name}: {self.names} must lead {self.make}'s parameters")

    @classmethod
    def of(cls, name: str, kind: Any, metadata: str) -> Reply[Any]:
        """Declare the reply from the fields of dataclass `kind` that carry `metadata`."""
        fields = tuple(
            (f.name, f.metadata[metadata])
            for f in dataclasses.fields(kind)
            if metadata in f.metadata
        )
        return cls(name, fields, kind)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    def decode(self, flat: Sequence[Any]) -> list[T]:
        """Return one item per len(fields) values of flat, each built from its named fields."""
        width = len(self.fields)
        if len(flat) % width:
            raise ValueError(f"{self.name} reply of {len(flat)} values is not {width} per item")
        make, decoders = self.make, [decode for _, decode in self.fields]
        return [
            make(*[decode(v) for decode, v in zip(decoders, flat[i : i + width], strict=True)])
            for i in range(0, len(flat), width)
        ]

    def lua_builder(self) -> str:
        """Return the Lua function that appends one item (these fields, in order) to out.

        Positional, not a table per item: a table per task cost submit.lua measurable time.
        """
        params = ", ".join(self.names)
        sets = "\n".join(
            f"  out[n + {i}] = {name} or ''" for i, (name, _) in enumerate(self.fields, 1)
        )
        return f"local function reply_{self.name}(out, {params})\n  local n = #out\n{sets}\nend"


class Entry(NamedTuple):
    """A stream entry read for this worker (read.lua, take.lua left to claim, a blocking read)."""

    queue_index: int
    band: int
    entry: str
    task_id: str
    idem: str


class Submitted(NamedTuple):
    """submit.lua's answer for one task: kind ('ok', 'duplicate', 'full', ...) and details."""

    kind: str
    id: str
    state: str
    created: str


class Decided(NamedTuple):
    """finalize.lua's decision for one outcome: the state it wrote, or '' if fenced out."""

    state: str
    resent: bool  # this outcome was recorded by an earlier send of the same call

    @property
    def applied(self) -> bool:
        return bool(self.state)


ENTRY = Reply(
    "entry",
    (("queue_index", int), ("band", int), ("entry", str), ("task_id", str), ("idem", str)),
    Entry,
)
SUBMITTED = Reply(
    "submitted", (("kind", str), ("id", str), ("state", str), ("created", str)), Submitted
)
CLAIMED: Reply[Attempt] = Reply.of("claimed", Attempt, "claim")
DECIDED = Reply("decided", (("state", str), ("resent", lambda v: v == 1)), Decided)
REPLIES = (ENTRY, SUBMITTED, CLAIMED, DECIDED)


class AllAccepted(NamedTuple):
    """submit.lua's answer when every task of its call was accepted as sent: 'ok', the id sent,
    QUEUED (PENDING when delayed), created at this time (ms, Redis' clock)."""

    created: str


def submitted(reply: list[Any]) -> list[Submitted] | AllAccepted:
    """Decode a submit.lua reply: 'all' and the time, or SUBMITTED's fields per task."""
    if len(reply) == 2 and reply[0] == "all":
        return AllAccepted(reply[1])
    return SUBMITTED.decode(reply)


def lua_reply_builders() -> str:
    """Return the Lua reply builders of every declared reply (scripts.py writes them in)."""
    return "\n\n".join(reply.lua_builder() for reply in REPLIES)


def _call(client: Any, name: str, call: Call) -> Any:
    # On a Redis Cluster the call goes to the primary of its keys' slot (connection.routed).
    return call_script(routed(client, call[0]), script(name), *call)


def _build(
    keys: Keys,
    queues: Sequence[str],
    refs: Iterable[TaskRef],
    *args: Any,
    places: Sequence[tuple[str, int]] = (),
    name: str = "",
) -> Call:
    """Lay out a call in the named script's layout; places (workflow id, member) per task add
    lib.lua's workflow blocks.

    The workflow trailer (layout.workflow_trailer) goes after args, so a script that counts
    members reads it last; without workflows it is one 0, or nothing when places is empty.
    """
    workflows = list(dict.fromkeys(w for w, _ in places if w))
    key_list, header = layout.build(keys, queues, refs, workflows, layout=layout.of(name))
    trailer = layout.workflow_trailer(workflows, places) if workflows else []
    return key_list, [*header, *args, *trailer]


# ----- submit ------------------------------------------------------------------------------


class NewTask(NamedTuple):
    """One validated task for submit.lua: what its record starts with (payload encoded)."""

    id: str
    queue: str
    name: str
    priority: int
    band: int
    max_attempts: int
    payload: str  # JSON
    delay_ms: int  # 0 = now
    expires_at: int  # ms, 0 = never
    timeout: float | None
    retry: dict[str, float]
    idempotency_key: str | None
    fingerprint: str  # of name and payload; '' without an idempotency key
    max_depth: int  # the queue's depth limit, 0 = none
    limits: str  # the record's flow-control 'lim' field (engine/limits.py); '' = none

    @property
    def state(self) -> str:
        """The state submit.lua gives the task: PENDING while it waits its delay, else QUEUED."""
        return "PENDING" if self.delay_ms else "QUEUED"


def submit_call(keys: Keys, tasks: Sequence[NewTask]) -> Call:
    """Return the submit.lua call for these tasks (one shard's, in reply order).

    What tasks share (queue, name, options, key...) is one shape, sent once per call; each
    task sends its shape's number, its id and its payload.
    """
    queues: list[str] = []
    refs: list[TaskRef] = []
    per_task: list[Any] = []
    shapes: dict[tuple[Any, ...], int] = {}
    for task in tasks:
        refs.append(TaskRef(task.id, task.queue, task.idempotency_key or ""))
        shape = (
            layout.queue_index(queues, task.queue),
            task.name,
            task.priority,
            task.band,
            task.max_attempts,
            task.delay_ms,
            task.expires_at,
            "" if task.timeout is None else task.timeout,
            tuple(task.retry.items()),  # its JSON made once per shape, below
            task.idempotency_key or "",
            task.fingerprint,
            task.max_depth,
            task.limits,
        )
        number = shapes.setdefault(shape, len(shapes) + 1)
        per_task += (number, task.id, task.payload)
    shape_args = [
        codec.dumps(dict(field)) if i == 8 else field
        for shape in shapes
        for i, field in enumerate(shape)
    ]
    return _build(keys, queues, refs, len(shapes), *shape_args, *per_task, name="submit")


def submit_one_call(keys: Keys, task: NewTask) -> Call:
    """Return the submit_one.lua call for one task: only the keys and fields it uses."""
    key_list = [
        keys.task(task.id),
        *_submit_one_keys(keys, task.queue, task.band, task.delay_ms > 0, int(time.time() // 60)),
    ]
    if task.idempotency_key:
        key_list.append(keys.idempotency(task.queue, task.idempotency_key))
    args: list[Any] = [
        task.payload,
        task.name,
        task.queue,
        task.band,
        task.max_attempts,
        codec.dumps(task.retry),
        dtq_settings.EVENT_STREAM_MAXLEN,
    ]
    # The rest only when set (each argument costs Redis its parsing and a Lua string).
    if task.priority:
        args += ("priority", task.priority)
    if task.delay_ms:
        args += ("delay", task.delay_ms)
    if task.max_depth:
        args += ("depth", task.max_depth)
    if task.idempotency_key:
        args += ("idem", task.idempotency_key, "fp", task.fingerprint)
    if task.expires_at:
        args += ("expires_at", task.expires_at)
    if task.timeout is not None:
        args += ("timeout", task.timeout)
    if task.limits:
        args += ("lim", task.limits)
    return key_list, args


@functools.lru_cache(maxsize=256)
def _submit_one_keys(
    keys: Keys, queue: str, band: int, delayed: bool, minute: int
) -> tuple[str, ...]:
    """Return submit_one.lua's keys 2-7 (cached: one queue's tasks share them for a minute)."""
    return (
        keys.stats(queue),
        keys.schedule if delayed else keys.stream(queue, band),
        keys.index(queue, "PENDING" if delayed else "QUEUED"),
        keys.events,
        keys.throughput(minute),
        keys.queues,
    )


def submit(client: Any, call: Call) -> list[Submitted]:
    """Run one submit_one.lua call (submit_one_call); error replies (OOM...) are raised."""
    return SUBMITTED.decode(_call(client, "submit_one", call))


def by_primary(client: Any, tags: list[str]) -> list[tuple[Any, list[int]]]:
    """Group calls by the client of their keys' primary: (client, positions in tags).

    tags holds a key of each call (Keys.tag of its shard). One group on one server or with
    one shard; on a Redis Cluster one per primary.
    """
    groups: dict[int, tuple[Any, list[int]]] = {}
    for position, tag in enumerate(tags):
        target = routed(client, [tag])
        groups.setdefault(id(target), (target, []))[1].append(position)
    return list(groups.values())


def submit_many(
    client: Any,
    calls: Calls,
    settle: Callable[[int, list[Submitted] | AllAccepted | Exception], None],
) -> None:
    """Run many submit.lua calls of one primary (see by_primary) pipelined, one call a write.

    settle(i, answers) takes each call's answers as its reply is read, while Redis runs the
    next call (again if the call is sent again); a call refused whole gives its exception.
    """
    client = routed(client, calls[0][0]) if len(calls) else client
    replies = call_script_many(
        client, script("submit"), calls, decode=lambda i, reply: settle(i, submitted(reply))
    )
    for i, reply in enumerate(replies):
        if isinstance(reply, Exception):  # e.g. OOM: the call wrote nothing
            settle(i, reply)


# ----- the worker: read, claim, finalize, skip, renew ----------------------------------------


async def read(
    caller: AsyncCaller, keys: Keys, queues: list[str], worker_id: str, capacity: int
) -> tuple[list[Entry], list[str]]:
    """Read up to capacity entries in priority order; also return the streams to watch."""
    reply = await caller.script(
        script("read"), *_build(keys, queues, (), worker_id, capacity, name="read")
    )
    return ENTRY.decode(reply[0]), list(reply[1])


async def claim(
    caller: AsyncCaller,
    keys: Keys,
    queues: list[str],
    entries: list[Entry],
    worker_id: str,
    lease_ms: int,
) -> list[Attempt]:
    """Claim read entries; return the attempts this worker now runs."""
    refs = [TaskRef(e.task_id or "gone", queues[e.queue_index - 1], e.idem) for e in entries]
    args = [v for e in entries for v in (e.queue_index, e.band, e.entry)]
    call = _build(keys, queues, refs, worker_id, lease_ms, *args, name="claim")
    reply = await caller.script(script("claim"), *call)
    attempts = CLAIMED.decode(reply)
    for att in attempts:
        att.queue = queues[att.queue_index - 1]
    return attempts


class Taken(NamedTuple):
    """take.lua's answer: the attempts claimed, the streams to watch, how many entries it read."""

    attempts: list[Attempt]
    watch: list[str]
    read: int
    again: bool  # the token was sent before: the attempts are what that send claimed
    left: list[Entry]  # read as ours but left to claim.lua (a task key it could not reach)
    now_ms: int  # Redis' clock when the call ran (ms)


def take_call(
    keys: Keys,
    queues: list[str],
    worker_id: str,
    lease_ms: int,
    capacity: int,
    token: str,
    after: Sequence[str] = (),
) -> Call:
    """Lay out a take.lua call; after (3 ids per queue) makes it claim what a blocking read
    sent just before it delivered, instead of reading new entries."""
    key_list, args = _build(
        keys, queues, (), worker_id, lease_ms, capacity, token, keys.tag, *after, name="take"
    )
    return [*key_list, keys.take(worker_id)], args


def taken(reply: Any, queues: list[str]) -> Taken:
    """Decode take.lua's reply."""
    attempts = CLAIMED.decode(reply[0])
    for att in attempts:
        att.queue = queues[att.queue_index - 1]
    watch, left = list(reply[1]), ENTRY.decode(reply[4])
    return Taken(attempts, watch, int(reply[2]), reply[3] == 1, left, int(reply[5]))


async def take(
    caller: AsyncCaller,
    keys: Keys,
    queues: list[str],
    worker_id: str,
    lease_ms: int,
    capacity: int,
    token: str,
) -> Taken:
    """Read up to capacity new entries and claim them in one call (take.lua).

    The same token again (a resend, or the next call after one failed) answers with what the
    first call with it claimed (leases renewed), without reading. The task keys are built in
    the script, from the shard's key tag: only it knows which tasks it read.
    """
    call = take_call(keys, queues, worker_id, lease_ms, capacity, token)
    return taken(await caller.script(script("take"), *call), queues)


def _batch(
    keys: Keys,
    batch: Sequence[tuple[Attempt, Outcome]],
    fields: Callable[[Attempt, Outcome], list[Any]],
) -> tuple[list[str], list[TaskRef], list[Any]]:
    queues: list[str] = []
    refs, args = [], []
    for att, out in batch:
        qi = layout.queue_index(queues, att.queue)
        refs.append(TaskRef(att.id, att.queue, att.idem))
        args += [qi, att.band, att.entry, att.attempt, *fields(att, out)]
    return queues, refs, args


async def finalize(
    caller: AsyncCaller,
    keys: Keys,
    batch: Sequence[tuple[Attempt, Outcome]],
    use_dlq: bool,
    worker_id: str,
) -> list[Decided]:
    """Record finished attempts; return what finalize.lua decided for each, in order."""
    # A success's history entry is not stored (the record's fields are it): it is sent empty.
    queues, refs, args = _batch(
        keys,
        batch,
        lambda _, out: [
            out.kind,
            out.data,
            "" if out.kind == "success" else out.history,
            out.delay_ms,
        ],
    )
    places = [(att.workflow, att.workflow_member) for att, _ in batch]
    call = _build(
        keys,
        queues,
        refs,
        "1" if use_dlq else "0",
        worker_id,
        *args,
        places=places,
        name="finalize",
    )
    return DECIDED.decode(await caller.script(script("finalize"), *call))


async def skip(
    caller: AsyncCaller, keys: Keys, batch: Sequence[tuple[Attempt, Outcome]], worker_id: str
) -> list[bool]:
    """Record attempts dropped unrun; True for each given back (still ours), in order."""
    queues, refs, args = _batch(keys, batch, lambda _, out: [out.data, out.history])
    reply = await caller.script(script("skip"), *_build(keys, queues, refs, worker_id, *args))
    return [bool(v) for v in reply]


async def renew(
    caller: AsyncCaller, keys: Keys, held: Sequence[Attempt], lease_ms: int
) -> list[int]:
    """Renew held leases: per attempt 0 lost, 1 renewed, 2 renewed and cancel requested."""
    queues: list[str] = []
    refs = [TaskRef(att.id, att.queue) for att in held]
    args = [
        a
        for att in held
        for a in (layout.queue_index(queues, att.queue), att.id, att.entry, att.attempt)
    ]
    call = _build(keys, queues, refs, lease_ms, *args, name="renew")
    reply = await caller.script(script("renew"), *call)
    return [int(v) for v in reply]


async def forget_consumer_async(
    caller: AsyncCaller, keys: Keys, queues: list[str], worker_id: str
) -> int:
    """Forget a consumer in every stream where it holds nothing; count streams it still holds."""
    reply = await caller.script(script("forget_consumer"), *_build(keys, queues, (), worker_id))
    return int(reply)


# ----- reaper and scheduler ----------------------------------------------------------------


class Reclaimed(NamedTuple):
    requeued: int
    dead_lettered: int
    skipped: int


class Promoted(NamedTuple):
    promoted: int
    expired: int
    dropped: int


class Reconciled(NamedTuple):
    redelivered: int
    reclaimed: int
    absorbed: int
    left: int


def _tasks_by_queue(refs: Sequence[TaskRef]) -> tuple[list[str], list[Any]]:
    queues: list[str] = []
    pairs: list[Any] = []
    for ref in refs:
        pairs += [layout.queue_index(queues, ref.queue), ref.id]
    return queues, pairs


def reclaim(
    client: Any,
    keys: Keys,
    refs: Sequence[TaskRef],
    use_dlq: bool,
    places: Sequence[tuple[str, int]] = (),
) -> Reclaimed:
    """Requeue (or dead-letter) these RUNNING tasks whose lease ran out.

    places: each task's (workflow id, member index), ('', 0) for none: a member dead-lettered
    here is counted in its workflow in the same call.
    """
    queues, pairs = _tasks_by_queue(refs)
    call = _build(keys, queues, refs, "1" if use_dlq else "0", *pairs, places=places)
    return Reclaimed(*(int(v) for v in _call(client, "reclaim", call)))


def promote(client: Any, keys: Keys, refs: Sequence[TaskRef]) -> Promoted:
    """Move these due PENDING / RETRYING tasks to their streams."""
    queues, pairs = _tasks_by_queue(refs)
    return Promoted(*(int(v) for v in _call(client, "promote", _build(keys, queues, refs, *pairs))))


def reconcile(
    client: Any,
    keys: Keys,
    queue: str,
    refs: Sequence[TaskRef],
    entries: Sequence[tuple[int, str]],
    use_dlq: bool,
) -> Reconciled:
    """Settle pending entries (band, entry id) taken over from a dead or idle consumer."""
    args = [v for band, eid in entries for v in (1, band, eid)]
    call = _build(keys, [queue], refs, "1" if use_dlq else "0", *args)
    return Reconciled(*(int(v) for v in _call(client, "reconcile", call)))


def forget_consumer(client: Any, keys: Keys, queues: list[str], worker_id: str) -> int:
    """Forget a consumer in every stream where it holds nothing; count streams it still holds."""
    return int(_call(client, "forget_consumer", _build(keys, queues, (), worker_id)))


def forget_queue(client: Any, keys: Keys, queue: str) -> bool:
    """Forget an undeclared queue that holds nothing; False when it was kept."""
    return bool(_call(client, "forget_queue", _build(keys, [queue], ())))


# ----- operator actions ----------------------------------------------------------------------


class CancelResult(NamedTuple):
    """cancel.lua's answer: 'cancelled', 'requested', 'missing', 'finished' (detail: state)
    or 'moved' (detail: the task's queue now)."""

    kind: str
    detail: str


def cancel(
    client: Any, keys: Keys, ref: TaskRef, reason: str, place: tuple[str, int] | None = None
) -> CancelResult:
    """Cancel one task of ref.queue (see CancelResult); place: its (workflow id, member)."""
    token = secrets.token_hex(8)  # one per request: a resend of this call carries it too
    call = _build(keys, [ref.queue], [ref], reason, token, places=[place] if place else ())
    reply = _call(client, "cancel", call)
    return CancelResult(str(reply[0]), str(reply[1]) if len(reply) > 1 else "")


def pause(client: Any, keys: Keys, queue: str, paused: bool, reason: str) -> bool:
    """Pause or resume a queue; False when it already was."""
    token = secrets.token_hex(8)  # one per request: a resend of this call carries it too
    call = _build(keys, [queue], (), "1" if paused else "0", reason, token)
    return bool(_call(client, "pause", call))


class LimitsSet(NamedTuple):
    """limits.lua's answer: the queue's own concurrency limit's waiters and slots after it."""

    waiting: int
    held: int


def set_limits(
    client: Any, keys: Keys, queue: str, max_concurrency: int | None, rate: str, change: bool
) -> LimitsSet:
    """Set a queue's limits (rate: Rate.encoded() or '') and wake waiters there is room for."""
    conc = "" if max_concurrency is None else max_concurrency
    call = _build(keys, [queue], (), conc, rate, "1" if change else "0")
    waiting, held = _call(client, "limits", call)
    return LimitsSet(int(waiting), int(held))


def replay(
    client: Any,
    keys: Keys,
    queue: str,
    to_queue: str,
    refs: Sequence[TaskRef],
    max_attempts: int,
    entry_ids: Sequence[str],
    edits: Sequence[str] | None,
) -> list[str]:
    """Replay DLQ entries of queue onto to_queue (may be the same); one status per entry."""
    queues = [queue]
    target = layout.queue_index(queues, to_queue)
    args: list[Any] = [1, target, max_attempts, *entry_ids, *(edits or ())]
    return [str(v) for v in _call(client, "replay", _build(keys, queues, refs, *args))]


def retry_failed(
    client: Any,
    keys: Keys,
    queue: str,
    to_queue: str,
    refs: Sequence[TaskRef],
    fences: Sequence[str],
    edits: Sequence[str],
) -> list[str]:
    """Retry FAILED tasks of queue onto to_queue (may be the same); one status per task.

    fences: each record's finished_at as read (the failure retried); edits: '' for none.
    """
    queues = [queue]
    args: list[Any] = [1, layout.queue_index(queues, to_queue)]
    for fence, edit in zip(fences, edits, strict=True):
        args += [fence, edit]
    return [str(v) for v in _call(client, "retry_failed", _build(keys, queues, refs, *args))]


def discard(
    client: Any,
    keys: Keys,
    queue: str,
    refs: Sequence[TaskRef],
    reason: str,
    entry_ids: Sequence[str],
) -> list[str]:
    """Delete DLQ entries of one queue; one status per entry."""
    call = _build(keys, [queue], refs, reason, *entry_ids)
    return [str(v) for v in _call(client, "discard", call)]


def dlq_trim(client: Any, keys: Keys, queue: str, cutoff_ms: int, batch: int) -> int:
    """Remove up to batch DLQ entries older than cutoff_ms; count them."""
    return int(_call(client, "dlq_trim", _build(keys, [queue], (), cutoff_ms, batch)))


class Purged(NamedTuple):
    queued: int
    scheduled: int
    released: int
    removed: int
    skipped: int


def purge(
    client: Any,
    keys: Keys,
    queue: str,
    refs: Sequence[TaskRef],
    reason: str,
    items: Sequence[tuple[str, str, str, str]],
) -> Purged:
    """Purge one batch of a queue's waiting tasks (see purge.lua for the item fields)."""
    call = _build(keys, [queue], refs, reason, *(v for item in items for v in item))
    return Purged(*(int(v) for v in _call(client, "purge", call)))


def progress(client: Any, keys: Keys, ref: TaskRef, attempt: int, value: str) -> int:
    """Store one progress value: 1 stored, 0 refused, 2 the same value was stored."""
    return int(_call(client, "progress", _build(keys, [ref.queue], [ref], attempt, value)))


# ----- idempotent operations (op_*) ----------------------------------------------------------


def _op_call(keys: Keys, key: str, token: str, *args: Any) -> Call:
    key_list, argv = _build(keys, [], (), token, *args)
    return [*key_list, keys.operation(key)], argv


def op_begin(client: Any, keys: Keys, key: str, token: str, lease_ms: int) -> list[Any]:
    """Return ['acquired'], ['done', result JSON] or ['busy', lease left in ms]."""
    return list(_call(client, "op_begin", _op_call(keys, key, token, lease_ms)))


def op_renew(client: Any, keys: Keys, key: str, token: str, lease_ms: int) -> bool:
    """Extend an operation's lease; False when it is no longer ours."""
    return bool(_call(client, "op_renew", _op_call(keys, key, token, lease_ms)))


def op_finish(
    client: Any, keys: Keys, key: str, token: str, outcome: str, result: str, ttl: int
) -> list[Any]:
    """Return ['stored', result] | ['kept', earlier result] | ['released'] | ['lost']."""
    return list(_call(client, "op_finish", _op_call(keys, key, token, outcome, result, ttl)))


# ----- periodic schedules (standalone scripts: one schedule's keys) --------------------------


def periodic_claim(
    client: Any, keys: Keys, name: str, owner: str, slot: int, lease_ms: int
) -> list[Any]:
    """Claim one (schedule, slot): ['ok', now] | ['done', cursor] | ['busy', owner] | ['paused']."""
    call: Call = ([keys.periodic(name)], [owner, slot, lease_ms])
    return list(_call(client, "periodic_claim", call))


def periodic_commit(
    client: Any,
    keys: Keys,
    name: str,
    owner: str,
    slot: int,
    kind: str,
    task_id: str,
    log_length: int,
    lines: Sequence[str],
) -> list[Any]:
    """Record a slot's decision and its log lines (see periodic_commit.lua)."""
    call: Call = (
        [keys.periodic(name), keys.periodic_log(name)],
        [owner, slot, kind, task_id, log_length, *lines],
    )
    return list(_call(client, "periodic_commit", call))


def periodic_resume(client: Any, keys: Keys, name: str, log_length: int, reason: str) -> bool:
    """Resume a paused schedule from now on; False if it was not paused."""
    token = secrets.token_hex(8)  # one per request: a resend of this call carries it too
    call: Call = ([keys.periodic(name), keys.periodic_log(name)], [log_length, reason, token])
    return bool(_call(client, "periodic_resume", call))


# ----- workflows ---------------------------------------------------------------------------


class WorkflowSynced(NamedTuple):
    """workflow_sync.lua's answer: the workflow's state, ready members, due entry moved."""

    state: str
    ready: int
    moved: bool


def workflow_sync(
    client: Any,
    keys: Keys,
    workflow_id: str,
    members: Sequence[tuple[int, str, str]],
    seen: float | None,
    next_ms: int,
    refused: dict[str, str] | None = None,
) -> WorkflowSynced:
    """Count members' final states (member, task id, queue) in their workflow; see the script.

    seen: the due score the caller read (None: leave the due entry alone); refused maps task
    ids never submitted to their error JSON.
    """
    queues: list[str] = []
    refs, args = [], []
    for _, task_id, queue in members:
        args += [layout.queue_index(queues, queue), task_id, (refused or {}).get(task_id, "")]
        refs.append(TaskRef(task_id, queue))
    seen_arg = "" if seen is None else str(int(seen))
    # No members: one place still names the workflow block (the script reads no task then).
    places = [(workflow_id, m) for m, _, _ in members] or [(workflow_id, 0)]
    call = _build(keys, queues, refs, seen_arg, next_ms, *args, places=places)
    state, ready, moved = _call(client, "workflow_sync", call)
    return WorkflowSynced(str(state), int(ready), bool(moved))
