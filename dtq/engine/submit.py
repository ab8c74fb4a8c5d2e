"""Submit tasks: validate before any write, then one script call per task."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec, ids, layout
from dtq.engine.connection import get_client
from dtq.engine.direct import call_script
from dtq.engine.errors import (
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidTaskError,
    QueueFull,
    SubmitError,
)
from dtq.engine.keys import Keys, band_of, check_queue_name
from dtq.engine.scripts import Scripts

IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
MAX_NAME_LENGTH = 200


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True)
class Accepted:
    """The outcome of a submission: the task id, its state, and whether it is a replay."""

    id: str
    state: str
    duplicate: bool = False


def validate(sub: Submission) -> None:
    """Raise SubmitError or InvalidTaskError when the submission breaks a limit."""
    if not sub.name or len(sub.name) > MAX_NAME_LENGTH:
        raise InvalidTaskError(f"task name must be 1-{MAX_NAME_LENGTH} characters")
    try:
        check_queue_name(sub.queue)
    except ValueError as exc:
        raise InvalidTaskError(str(exc)) from None
    if not -100 <= sub.priority <= 100:
        raise InvalidTaskError(f"priority must be in -100..100, got {sub.priority}")
    if sub.max_attempts < 1:
        raise InvalidTaskError(f"max_attempts must be at least 1, got {sub.max_attempts}")
    if not 0 <= sub.delay <= dtq_settings.MAX_DELAY:
        raise SubmitError(f"delay must be within 0..{dtq_settings.MAX_DELAY}s, got {sub.delay}")
    if sub.ttl is not None and sub.ttl <= 0:
        raise InvalidTaskError(f"ttl must be positive, got {sub.ttl}")
    if sub.timeout is not None and sub.timeout <= 0:
        raise InvalidTaskError(f"timeout must be positive, got {sub.timeout}")
    if sub.task_id is not None and not ids.is_valid(sub.task_id):
        raise InvalidTaskError(f"task_id is not a dtq id: {sub.task_id!r}")
    key = sub.idempotency_key
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise SubmitError(
            "idempotency key must be 1-200 characters of letters, digits and _ . : @ / + = -"
        )


def _task_args(sub: Submission, task_id: str, qi: int) -> list[Any]:
    """Return the 14 submit.lua fields of one validated submission."""
    s = dtq_settings
    payload = codec.encode_payload(sub.args, sub.kwargs, int(s.MAX_PAYLOAD_BYTES))
    expires_at = 0
    if sub.ttl is not None:
        expires_at = ids.created_ms(task_id) + int((sub.delay + sub.ttl) * 1000)
    return [
        qi,
        task_id,
        sub.name,
        sub.priority,
        band_of(sub.priority),
        sub.max_attempts,
        payload,
        int(sub.delay * 1000),
        expires_at,
        "" if sub.timeout is None else sub.timeout,
        codec.dumps(sub.retry),
        sub.idempotency_key or "",
        codec.fingerprint(sub.name, payload) if sub.idempotency_key else "",
        s.max_depth(sub.queue),
    ]


def _task_id(sub: Submission) -> tuple[str, int]:
    """Return the submission's task id (chosen now unless given) and its shard."""
    if sub.task_id is not None:
        return sub.task_id, ids.shard_of(sub.task_id)
    shards = int(dtq_settings.SHARDS)
    shard = 0 if shards <= 1 else secrets.randbelow(shards)
    return ids.new_id(shard), shard


def _calls(
    subs: Sequence[Submission], prefix: str | None = None
) -> list[tuple[list[str], list[Any], list[int]]]:
    """Encode validated submissions into submit.lua calls, one per shard.

    Each call is (KEYS, ARGV, the positions in subs of its tasks, in reply order).
    """
    by_shard: dict[int, tuple[list[str], list[layout.TaskRef], list[Any], list[int]]] = {}
    for position, sub in enumerate(subs):
        task_id, shard = _task_id(sub)
        queues, refs, args, positions = by_shard.setdefault(shard, ([], [], [], []))
        refs.append(layout.TaskRef(task_id, sub.queue, sub.idempotency_key or ""))
        args += _task_args(sub, task_id, layout.queue_index(queues, sub.queue))
        positions.append(position)
    calls = []
    for shard, (queues, refs, args, positions) in by_shard.items():
        keys = Keys(prefix or dtq_settings.KEY_PREFIX, shard)
        key_list, header = layout.build(keys, queues, refs)
        calls.append((key_list, [*header, *args], positions))
    return calls


def prepare(sub: Submission, prefix: str | None = None) -> tuple[list[str], list[Any]]:
    """Validate and encode one submission into (KEYS, ARGV) for submit.lua."""
    validate(sub)
    task_id, shard = _task_id(sub)
    keys = Keys(prefix or dtq_settings.KEY_PREFIX, shard)
    ref = layout.TaskRef(task_id, sub.queue, sub.idempotency_key or "")
    key_list, header = layout.build(keys, [sub.queue], [ref])
    return key_list, [*header, *_task_args(sub, task_id, 1)]


def interpret(sub: Submission, reply: list[Any]) -> Accepted:
    """Turn one task's three reply fields of submit.lua into an Accepted, or raise."""
    kind = reply[0]
    if kind == "ok":
        return Accepted(reply[1], reply[2])
    if kind == "duplicate":
        return Accepted(reply[1], "", duplicate=True)
    if kind == "full":
        raise QueueFull(sub.queue, dtq_settings.max_depth(sub.queue), retry_after=1)
    key = sub.idempotency_key or ""
    if kind == "in_progress":
        raise IdempotencyInProgress(key, reply[1])
    raise IdempotencyConflict(key, reply[1])


def submit(sub: Submission) -> Accepted:
    """Accept one task, atomically, in a single script call."""
    key_list, argv = prepare(sub)
    client = get_client()
    return interpret(sub, call_script(client, Scripts.of(client).submit, key_list, argv))


MANY_CHUNK = 500  # tasks per script call at most: a script blocks Redis while it runs


def submit_many(subs: Sequence[Submission]) -> list[Accepted | SubmitError]:
    """Accept many tasks in one script call per shard and MANY_CHUNK tasks, in order.

    Each task is accepted or refused on its own, as if submitted alone (a full queue or an
    idempotency conflict refuses that task only); invalid input raises before any write.
    """
    for sub in subs:
        validate(sub)
    chunks = [subs[start : start + MANY_CHUNK] for start in range(0, len(subs), MANY_CHUNK)]
    encoded = [_calls(chunk) for chunk in chunks]  # a payload too large raises here, unsent
    client = get_client()
    script = Scripts.of(client).submit
    results: list[Accepted | SubmitError | None] = [None] * len(subs)
    for n, (chunk, calls) in enumerate(zip(chunks, encoded, strict=True)):
        start = n * MANY_CHUNK
        for key_list, argv, positions in calls:
            reply = call_script(client, script, key_list, argv)
            for i, position in enumerate(positions):
                try:
                    results[start + position] = interpret(chunk[position], reply[3 * i :])
                except SubmitError as exc:
                    results[start + position] = exc
    return [r for r in results if r is not None]


async def asubmit(sub: Submission) -> Accepted:
    """Accept one task from async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(submit, thread_sensitive=False)(sub)
