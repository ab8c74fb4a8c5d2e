"""Submit tasks: validate before any write, then one script call per task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import ResponseError

from dtq import propagation, tracing
from dtq.conf import dtq_settings
from dtq.engine import codec, durable, gateway, ids, refusals, registry, shards
from dtq.engine.connection import get_client
from dtq.engine.declared import check_declared
from dtq.engine.errors import (
    BulkSubmitError,
    DtqError,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidTaskError,
    QueueFull,
    SubmitError,
)
from dtq.engine.keys import Keys, band_of
from dtq.options import (
    TaskOptions,
    check_delay,
    check_idempotency_key,
    check_jitter,
    check_max_attempts,
    check_priority,
    check_queue,
    check_seconds,
    delay_of,
)

MAX_NAME_LENGTH = 200


# Not frozen, though never changed once made (dataclasses.replace makes another): a frozen
# dataclass' __init__ costs ~3 us more per task, a tenth of a bulk task's client time.
@dataclass(slots=True, kw_only=True)
class Submission:
    """Everything needed to accept one task."""

    name: str
    queue: str
    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int = 3
    delay: float = 0.0  # seconds from now
    ttl: float | None = None  # seconds from now after which the task must not start
    timeout: float | None = None
    retry: dict[str, float] = field(default_factory=dict)
    idempotency_key: str | None = None
    task_id: str | None = None  # an id chosen beforehand (enqueue on commit returns it early)
    limits: str = ""  # the record's flow-control 'lim' field (engine/limits.py); '' = none
    workflow: str = ""  # the workflow this task is a member of (dtq.engine.workflows)
    workflow_member: int = 0  # its index among the workflow's members

    @classmethod
    def of(
        cls,
        name: str,
        options: TaskOptions,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        task_id: str | None = None,
        limits: str = "",
    ) -> Submission:
        """Return the submission of one run: the task's checked options, else DTQ's defaults."""
        s = dtq_settings
        return cls(
            name=name,
            queue=options.queue_name or s.DEFAULT_QUEUE,
            args=args,
            kwargs=kwargs,
            priority=options.priority,
            max_attempts=options.max_attempts or s.DEFAULT_MAX_ATTEMPTS,
            delay=delay_of(options.run_after),
            ttl=options.ttl,
            timeout=s.DEFAULT_TIMEOUT if options.timeout is None else options.timeout,
            retry=options.retry(),
            idempotency_key=options.idempotency_key,
            task_id=task_id,
            limits=limits,
        )

    def called(self, args: Sequence[Any], kwargs: dict[str, Any], limits: str = "") -> Submission:
        """Return another run with these arguments (and limits), sharing every option object.

        Shared objects let a bulk call check the options once (_same_options).
        """
        return Submission(
            name=self.name,
            queue=self.queue,
            args=args,
            kwargs=kwargs,
            priority=self.priority,
            max_attempts=self.max_attempts,
            delay=self.delay,
            ttl=self.ttl,
            timeout=self.timeout,
            retry=self.retry,
            idempotency_key=self.idempotency_key,
            limits=limits,
            workflow=self.workflow,
            workflow_member=self.workflow_member,
        )


@dataclass(frozen=True, slots=True)
class Accepted:
    """The outcome of a submission: the task id, its state, and whether it is a replay."""

    id: str
    state: str
    duplicate: bool = False
    created_ms: int = 0  # when Redis accepted the task, by Redis' clock (0: a replay)


def validate(sub: Submission) -> None:
    """Raise InvalidTaskError (InvalidOption for an option) when a submission breaks a limit."""
    _check_options_once(sub)
    _check_identity(sub)


# Options keys (_options_key) that passed _check_options, each with the task registry's version
# it was checked under (the declared queues follow the registry). A process submits few
# distinct sets of options, so most submissions, one at a time or in bulk, skip the checks
# (~6 us of a one-task submit's ~160 on loopback). Forgotten when any setting changes (DTQ,
# TASKS: the declared queues and limits come from them).
_valid_options: dict[tuple[Any, ...], int] = {}
MAX_VALID_OPTIONS = 4096  # distinct keys remembered at most: forgotten all at once beyond


def _check_options_once(sub: Submission) -> None:
    """Run _check_options unless sub's options passed it already under the same registry."""
    key = _options_key(sub)
    if key is not None and _valid_options.get(key) == registry.version():
        return
    _check_options(sub)
    if key is not None:
        if len(_valid_options) >= MAX_VALID_OPTIONS:
            _valid_options.clear()
        _valid_options[key] = registry.version()


@receiver(setting_changed)
def _forget_valid_options(**kwargs: Any) -> None:
    _valid_options.clear()


def _check_options(sub: Submission) -> None:
    """Raise when the options a submission shares with others of its kind break a limit."""
    if not sub.name or len(sub.name) > MAX_NAME_LENGTH:
        raise InvalidTaskError(f"task name must be 1-{MAX_NAME_LENGTH} characters")
    check_queue(sub.queue)
    check_declared(sub.queue)  # no submission creates a queue
    check_priority(sub.priority)
    if check_max_attempts(sub.max_attempts) is None:
        check_max_attempts(0)  # a submission always has a number: None is refused too
    check_delay(sub.delay)
    check_seconds("ttl", sub.ttl)
    check_seconds("timeout", sub.timeout)
    for part in ("base", "cap"):
        check_seconds(f"retry_{part}", sub.retry.get(part))
    check_jitter(sub.retry.get("jitter"))


def _check_identity(sub: Submission) -> None:
    """Raise when what names this one submission (its chosen id, its key) is not valid."""
    if sub.task_id is not None and not ids.is_valid(sub.task_id):
        raise InvalidTaskError(f"task_id is not a dtq id: {sub.task_id!r}")
    check_idempotency_key(sub.idempotency_key)


def _payload(sub: Submission, ctx: dict[str, Any]) -> str:
    """Encode a submission's arguments (and ctx, the propagated context it carries)."""
    return codec.encode_payload(
        sub.args, sub.kwargs, dtq_settings.MAX_PAYLOAD_BYTES, ctx, sub.workflow, sub.workflow_member
    )


def _new_task(sub: Submission, task_id: str, payload: str, ctx: dict[str, Any]) -> gateway.NewTask:
    """Return what submit.lua needs of one validated submission, its payload encoded."""
    expires_at = 0
    if sub.ttl is not None:
        expires_at = ids.created_ms(task_id) + int((sub.delay + sub.ttl) * 1000)
    return gateway.NewTask(
        id=task_id,
        queue=sub.queue,
        name=sub.name,
        priority=sub.priority,
        band=band_of(sub.priority),
        max_attempts=sub.max_attempts,
        payload=payload,
        delay_ms=int(sub.delay * 1000),
        expires_at=expires_at,
        timeout=sub.timeout,
        retry=sub.retry,
        idempotency_key=sub.idempotency_key,
        fingerprint=_fingerprint(sub, payload, ctx) if sub.idempotency_key else "",
        max_depth=dtq_settings.max_depth(sub.queue),
        limits=sub.limits,
    )


def _options_key(sub: Submission) -> tuple[Any, ...] | None:
    """Return what _check_options reads of sub, with the types (None: a value is unhashable).

    The types are part of it because True == 1 and 1.0 == 1, but only 1 is a priority.
    """
    values = (
        sub.name,
        sub.queue,
        sub.priority,
        sub.max_attempts,
        sub.delay,
        sub.ttl,
        sub.timeout,
        *sub.retry,
        *sub.retry.values(),
    )
    key = (values, tuple(map(type, values)))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _task_id(sub: Submission) -> tuple[str, int]:
    """Return the submission's task id (chosen now unless given) and its shard."""
    shard = _shard(sub)
    return (ids.new_id(shard) if sub.task_id is None else sub.task_id), shard


def _shard(sub: Submission) -> int:
    """Return the shard of the submission's task: its chosen id's, else one picked now."""
    if sub.task_id is not None:
        return ids.shard_of(sub.task_id)
    return shards.for_new_task(sub.queue, sub.idempotency_key, _limit_group(sub))


def _limit_group(sub: Submission) -> str | None:
    """Name the flow-control line a task's own limits put it in: its name and key value."""
    if not sub.limits:
        return None
    return f"{sub.name}\0{sub.limits.rsplit('|', 1)[-1]}"  # 'lim' ends with the key value


def with_task_id(sub: Submission) -> Submission:
    """Return sub with its task id chosen now, on its shard (to answer before the submit)."""
    return sub if sub.task_id is not None else replace(sub, task_id=_task_id(sub)[0])


class _Unit(NamedTuple):
    """One submit.lua call's worth of validated tasks: one shard's, at most MANY_CHUNK."""

    start: int  # where the chunk its tasks came from starts in the submissions
    shard: int
    ctx: dict[str, Any]  # the propagated context every task of the call carries
    subs: list[Submission]
    payloads: list[str]  # each submission's, encoded
    positions: list[int]  # of each task in its chunk, in reply order


def _units(
    subs: Sequence[Submission],
    errors: dict[int, DtqError],
    chunks: Sequence[tuple[int, int]] = (),
) -> list[_Unit]:
    """Validate submissions and encode their payloads, grouped by chunk and shard.

    chunks are the (start, end) of each call's share (_chunks; default: one for all). Only
    what can refuse a task is done here, before anything is written; ids and the calls are
    made by _Calls while Redis runs the call before. An invalid submission is left out and
    its error put in `errors` under its position.
    """
    units: list[_Unit] = []
    ctx = propagation.capture()  # one caller, one moment: the same context for every task
    checked: Submission | None = None  # the last submission whose options passed
    for start, end in chunks or [(0, len(subs))]:
        by_shard: dict[int, _Unit] = {}
        for position in range(start, end):
            sub = subs[position]
            try:
                if checked is None or not _same_options(sub, checked):
                    _check_options_once(sub)
                    checked = sub
                _check_identity(sub)
                shard = _shard(sub)
                payload = _payload(sub, ctx)
            except (SubmitError, InvalidTaskError) as exc:
                errors[position] = exc
                continue
            unit = by_shard.get(shard)
            if unit is None:
                unit = by_shard[shard] = _Unit(start, shard, ctx, [], [], [])
            unit.subs.append(sub)
            unit.payloads.append(payload)
            unit.positions.append(position - start)
        units += by_shard.values()
    return units


def _same_options(sub: Submission, other: Submission) -> bool:
    """Whether sub's checked options are other's very objects (Submission.called's runs).

    Identity, not equality: True == 1, but only 1 is a priority.
    """
    return (
        sub.name is other.name
        and sub.queue is other.queue
        and sub.priority is other.priority
        and sub.max_attempts is other.max_attempts
        and sub.delay is other.delay
        and sub.ttl is other.ttl
        and sub.timeout is other.timeout
        and sub.retry is other.retry
    )


class _Calls:
    """The submit.lua calls of some units, each built the first time it is sent.

    The gateway's pipeline sends a call, then builds the next (its task ids included) while
    Redis runs it: the client's work and Redis' overlap instead of adding up.
    """

    def __init__(self, units: list[_Unit]) -> None:
        self.units = units
        self._built: list[gateway.Call | None] = [None] * len(units)
        # Each built call's tasks as submit.lua accepts them when it replies 'all'
        # (gateway.AllAccepted): their ids and states, in the unit's order.
        self.as_sent: list[list[tuple[str, str]]] = [[] for _ in units]

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, i: int) -> gateway.Call:
        call = self._built[i]
        if call is None:
            unit = self.units[i]
            keys = Keys(dtq_settings.KEY_PREFIX, unit.shard)
            # A new id names the unit's shard, not _task_id's: a random shard is picked once.
            tasks = [
                _new_task(sub, sub.task_id or ids.new_id(unit.shard), payload, unit.ctx)
                for sub, payload in zip(unit.subs, unit.payloads, strict=True)
            ]
            call = self._built[i] = gateway.submit_call(keys, tasks)
            self.as_sent[i] = [(task.id, task.state) for task in tasks]
        return call


def prepare(sub: Submission, prefix: str | None = None) -> tuple[list[str], list[Any]]:
    """Validate and encode one submission into (KEYS, ARGV) for submit_one.lua."""
    validate(sub)
    task_id, shard = _task_id(sub)
    keys = Keys(prefix or dtq_settings.KEY_PREFIX, shard)
    ctx = propagation.capture()
    return gateway.submit_one_call(keys, _new_task(sub, task_id, _payload(sub, ctx), ctx))


def _fingerprint(sub: Submission, payload: str, ctx: dict[str, Any]) -> str:
    # The carried context (a trace, a request id) differs per request: it is not the task's.
    bare = codec.encode_payload(sub.args, sub.kwargs, 0) if ctx else payload
    return codec.fingerprint(sub.name, bare)


def interpret(sub: Submission, reply: gateway.Submitted) -> Accepted:
    """Turn submit.lua's answer for one task into an Accepted, or raise."""
    kind = reply.kind
    if kind == "ok":
        return Accepted(reply.id, reply.state, created_ms=int(reply.created))
    if kind == "duplicate":
        return Accepted(reply.id, "", duplicate=True)
    if kind == "full":
        raise QueueFull(sub.queue, dtq_settings.max_depth(sub.queue), retry_after=1)
    key = sub.idempotency_key or ""
    if kind == "in_progress":
        raise IdempotencyInProgress(key, reply.id)
    raise IdempotencyConflict(key, reply.id)


def submit(sub: Submission) -> Accepted:
    """Accept one task, atomically, in a single script call."""
    with tracing.producing(sub) as span:
        call = prepare(sub)
        client = get_client()
        try:
            (reply,) = gateway.submit(client, call)
        except ResponseError as exc:
            refused = refusals.as_submit_error(exc)
            if refused is None:
                raise
            raise refused from exc  # refused at its first write: nothing of the task was stored
        accepted = interpret(sub, reply)
        durable.confirm_submit(client, f"task {accepted.id}")
        tracing.accepted(span, accepted)
        return accepted


def prepare_many(subs: Sequence[Submission]) -> None:
    """Validate and encode every submission; BulkSubmitError names each invalid item."""
    errors: dict[int, DtqError] = {}
    _units(subs, errors)
    if errors:
        raise BulkSubmitError(errors, [None] * len(subs), submitted=False)


# Tasks per script call at most: a script blocks Redis while it runs, and calls of this size
# let the client build the next call while Redis runs one (see _Calls).
MANY_CHUNK = 100


def _chunks(n: int) -> list[tuple[int, int]]:
    """Return the (start, end) of each script call's share of n tasks, in order.

    The first two calls are a quarter and a half of MANY_CHUNK: Redis waits only for the
    first, small call to be built, and runs each while the client builds the next.
    """
    sizes = [max(MANY_CHUNK // 4, 1), max(MANY_CHUNK // 2, 1)]
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n:
        end = min(n, start + (sizes.pop(0) if sizes else MANY_CHUNK))
        bounds.append((start, end))
        start = end
    return bounds


def submit_many(subs: Sequence[Submission]) -> list[Accepted | SubmitError]:
    """Accept many tasks in one script call per shard and chunk (_chunks), pipelined.

    Every item is validated before anything is written (BulkSubmitError names each invalid
    one). Each task is then accepted or refused on its own, as if submitted alone (a full
    queue or an idempotency conflict refuses that task only): its entry is the SubmitError.
    """
    errors: dict[int, DtqError] = {}
    units = _units(subs, errors, _chunks(len(subs)))
    if errors:
        raise BulkSubmitError(errors, [None] * len(subs), submitted=False)
    tags = [Keys(dtq_settings.KEY_PREFIX, unit.shard).tag for unit in units]
    results: list[Accepted | SubmitError | None] = [None] * len(subs)
    for client, places in gateway.by_primary(get_client(), tags):  # one on one server
        mine = [units[p] for p in places]
        calls = _Calls(mine)
        gateway.submit_many(client, calls, _settler(subs, calls, results))
        durable.confirm_submit(client, f"{len(subs)} submitted task(s)")  # WAIT on its own link
    return [r for r in results if r is not None]


Answers = list[gateway.Submitted] | gateway.AllAccepted | Exception


def _settler(
    subs: Sequence[Submission], calls: _Calls, results: list[Accepted | SubmitError | None]
) -> Callable[[int, Answers], None]:
    """Return what puts the outcomes of call i (of calls) in results, by submission."""

    def settle(i: int, reply: Answers) -> None:
        unit = calls.units[i]
        if isinstance(reply, gateway.AllAccepted):
            created = int(reply.created)
            for (task_id, state), position in zip(calls.as_sent[i], unit.positions, strict=True):
                results[unit.start + position] = Accepted(task_id, state, created_ms=created)
            return
        for j, position in enumerate(unit.positions):
            place = unit.start + position
            results[place] = _outcome(subs[place], reply, j)

    return settle


def _outcome(
    sub: Submission, reply: list[gateway.Submitted] | Exception, i: int
) -> Accepted | SubmitError:
    """Return the i-th task's outcome of one submit.lua call (its reply or its error)."""
    if isinstance(reply, Exception):  # e.g. OOM: the call wrote nothing
        refused = refusals.as_submit_error(reply)
        return refused or SubmitError(f"Redis refused the submission: {reply}")
    try:
        return interpret(sub, reply[i])
    except SubmitError as exc:
        return exc


async def asubmit(sub: Submission) -> Accepted:
    """Accept one task from async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(submit, thread_sensitive=False)(sub)


async def asubmit_many(subs: Sequence[Submission]) -> list[Accepted | SubmitError]:
    """Accept many tasks from async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(submit_many, thread_sensitive=False)(subs)
