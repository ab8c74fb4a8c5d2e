"""Submit tasks: validate before any write, then one script call per task."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from dtq import propagation, tracing
from dtq.conf import dtq_settings
from dtq.engine import codec, ids, layout, refusals
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
    created_ms: int = 0  # when Redis accepted the task, by Redis' clock (0: a replay)


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


def prepare(sub: Submission, prefix: str | None = None) -> tuple[list[str], list[Any]]:
    """Validate and encode a submission into (KEYS, ARGV) for submit.lua."""
    validate(sub)
    s = dtq_settings
    ctx = propagation.capture()
    payload = codec.encode_payload(sub.args, sub.kwargs, int(s.MAX_PAYLOAD_BYTES), ctx)
    if sub.task_id is not None:
        task_id, shard = sub.task_id, ids.shard_of(sub.task_id)
    else:
        shard = 0 if s.SHARDS <= 1 else secrets.randbelow(s.SHARDS)
        task_id = ids.new_id(shard)
    keys = Keys(prefix or s.KEY_PREFIX, shard)
    ref = layout.TaskRef(task_id, sub.queue, sub.idempotency_key or "")
    key_list, header = layout.build(keys, [sub.queue], [ref])
    argv: list[Any] = list(header)
    expires_at = 0
    if sub.ttl is not None:
        expires_at = ids.created_ms(task_id) + int((sub.delay + sub.ttl) * 1000)
    argv += [
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
        _fingerprint(sub, payload, ctx) if sub.idempotency_key else "",
        s.max_depth(sub.queue),
    ]
    return key_list, argv


def _fingerprint(sub: Submission, payload: str, ctx: dict[str, Any]) -> str:
    # The carried context (a trace, a request id) differs per request: it is not the task's.
    bare = codec.encode_payload(sub.args, sub.kwargs, 0) if ctx else payload
    return codec.fingerprint(sub.name, bare)


def interpret(sub: Submission, reply: list[Any]) -> Accepted:
    """Turn submit.lua's reply into an Accepted, or raise the matching SubmitError."""
    kind = reply[0]
    if kind == "ok":
        return Accepted(reply[1], reply[2], created_ms=int(reply[3]))
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
    with tracing.producing(sub) as span:
        key_list, argv = prepare(sub)
        client = get_client()
        try:
            reply = call_script(client, Scripts.of(client).submit, key_list, argv)
        except ResponseError as exc:
            refused = refusals.as_submit_error(exc)
            if refused is None:
                raise
            raise refused from exc  # refused at its first write: nothing of the task was stored
        accepted = interpret(sub, reply)
        tracing.accepted(span, accepted)
        return accepted


def submit_many(subs: Sequence[Submission]) -> list[Accepted | SubmitError]:
    """Accept many tasks in one pipelined round trip; each one is still atomic on its own."""
    client = get_client()
    scripts = Scripts.of(client)
    prepared = [prepare(sub) for sub in subs]
    pipe = client.pipeline(transaction=False)
    for key_list, argv in prepared:
        scripts.submit(keys=key_list, args=argv, client=pipe)
    results: list[Accepted | SubmitError] = []
    for sub, reply in zip(subs, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, Exception):
            refused = refusals.as_submit_error(reply)
            if refused is None:
                raise reply
            results.append(refused)
            continue
        try:
            results.append(interpret(sub, reply))
        except SubmitError as exc:
            results.append(exc)
    return results


async def asubmit(sub: Submission) -> Accepted:
    """Accept one task from async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(submit, thread_sensitive=False)(sub)
