"""Workflows in Redis: create a member graph, release members whose inputs are in, read it back.

A workflow is one hash (keys.workflow) plus its ready set, in the shard of its members, so
every script that touches it stays in one hash slot. Each member has a task id fixed at
creation; members without inputs are submitted at once, the others wait as specs in the hash.
The scripts that give a member its final state (finalize.lua, cancel.lua, workflow_sync.lua)
count it in the same call (lib.lua's wf_note) and put a dependent whose inputs are all in
into the ready set. advance() submits ready members under their fixed ids, so a second
release of the same member is absorbed by submit.lua; it runs right after a worker's
finalize, and the reaper runs it again for workflows that stayed due (a process died
between the two), which is also when it counts members finished by a path that does not
count (workflow_sync.lua reads their records).

Hash fields: id, state (RUNNING | SUCCEEDED | FAILED | CANCELLED), policy (stop | continue),
total, done, bad, created_at, updated_at, label, result (the workflow's result expression);
per member m: t:m task id, spec:m (JSON: name, queue, args, kwargs, options,
input, deps), n:m inputs still missing, d:m its dependents (comma list), q:m '1' once
submitted, s:m its final state, r:m its result (JSON) or e:m its error (JSON), x:m '1' when
a stop cancelled it; halted: how many members a stop cancelled (released again on resume).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import WatchError

from dtq.conf import dtq_settings
from dtq.engine import codec, gateway, ids, layout, shards
from dtq.engine.errors import BulkSubmitError, DtqError, InvalidTaskError, SubmitError
from dtq.engine.keys import Keys
from dtq.engine.state import TERMINAL_STATES
from dtq.engine.submit import Submission, submit_many

log = logging.getLogger("dtq.workflows")

POLICIES = ("stop", "continue")
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
RECHECK_MS = 30_000  # a running workflow is looked at again this often (the backstop)
STALE_MS = 5_000  # due this long ago: the worker's own advance did not happen
SYNC_CHUNK = 200  # members per workflow_sync.lua call
FAILED_MARK = "dtq_failed"  # key of the stand-in for a failed input under policy 'continue'
MAX_MEMBERS = 100_000
RELEASE_BATCH = 5000  # ready members submitted per pipelined submit_many


class WorkflowNotFound(DtqError):
    """Raised when no workflow has this id (never created, or past retention)."""


@dataclass(slots=True, kw_only=True)
class MemberSpec:
    """One task of a workflow: what to submit and which members' results feed it."""

    submission: Submission
    deps: list[int] = field(default_factory=list)  # members that must finish first
    input: Any = None  # result expression prepended to its args (None: nothing passed)


def expression_members(expr: Any) -> list[int]:
    """Return the member indexes a result expression names, in order."""
    if expr is None:
        return []
    if isinstance(expr, int):
        return [expr]
    return [m for part in expr for m in expression_members(part)]


def member_of(payload: str) -> tuple[str, int]:
    """Return the (workflow id, member index) a task payload names; ('', 0) for no member."""
    if '"wf":"' not in payload:  # cheap test first: most tasks are no member
        return "", 0
    try:
        envelope = codec.loads(payload)
        value, member = envelope.get("wf", ""), envelope.get("wfm", 0)
    except (ValueError, AttributeError):
        return "", 0
    if isinstance(value, str) and ids.is_valid(value) and isinstance(member, int):
        return value, member
    return "", 0


def _keys(workflow_id: str) -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, ids.shard_of(workflow_id))


def check_id(workflow_id: str) -> str:
    """Return workflow_id if it has the shape of a dtq id, else raise WorkflowNotFound."""
    if not ids.is_valid(workflow_id):
        raise WorkflowNotFound(f"no workflow {workflow_id!r}: not a dtq id")
    return workflow_id


# ----- creation ---------------------------------------------------------------------------


def create(members: Sequence[MemberSpec], result: Any, policy: str, label: str) -> str:
    """Write a workflow in one MULTI, then submit the members that need no input; return its id."""
    if policy not in POLICIES:
        raise InvalidTaskError(f"on_failure must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not members:
        raise InvalidTaskError("a workflow needs at least one task")
    if len(members) > MAX_MEMBERS:
        raise InvalidTaskError(f"a workflow holds at most {MAX_MEMBERS} tasks, got {len(members)}")
    shard = shards.for_new_task("")  # a workflow has no idempotency key: any shard
    workflow_id = ids.new_id(shard)
    task_ids = [ids.new_id(shard) for _ in members]
    fields, dependents = _member_fields(members, task_ids)
    now = int(time.time() * 1000)
    fields.update(
        {
            "id": workflow_id,
            "state": "RUNNING",
            "policy": policy,
            "total": len(members),
            "done": 0,
            "bad": 0,
            "created_at": now,
            "updated_at": now,
            "label": label,
            "result": codec.dumps(result),
        }
    )
    for m, deps in dependents.items():
        fields[f"d:{m}"] = ",".join(map(str, deps))
    roots = [str(m) for m, spec in enumerate(members) if not spec.deps]
    keys = _keys(workflow_id)
    # all or nothing: no half-made workflow
    pipe = shards.client(keys.shard).pipeline(transaction=True)
    items = list(fields.items())
    for start in range(0, len(items), 2000):
        pipe.hset(keys.workflow(workflow_id), mapping=dict(items[start : start + 2000]))
    for start in range(0, len(roots), 2000):
        pipe.sadd(keys.workflow_ready(workflow_id), *roots[start : start + 2000])
    pipe.zadd(keys.workflows_due, {workflow_id: now})  # the reaper starts it if we die here
    pipe.execute()
    advance(workflow_id)
    return workflow_id


def _member_fields(
    members: Sequence[MemberSpec], task_ids: list[str]
) -> tuple[dict[str, Any], dict[int, list[int]]]:
    """Return the per-member hash fields and each member's dependents."""
    fields: dict[str, Any] = {}
    dependents: dict[int, list[int]] = {}
    for m, spec in enumerate(members):
        sub = spec.submission
        deps = sorted(set(spec.deps))
        fields[f"t:{m}"] = task_ids[m]
        fields[f"spec:{m}"] = codec.dumps(_spec_json(sub, deps, spec.input))
        if deps:
            fields[f"n:{m}"] = len(deps)
        for d in deps:
            dependents.setdefault(d, []).append(m)
    return fields, dependents


def _spec_json(sub: Submission, deps: list[int], expr: Any) -> dict[str, Any]:
    return {
        "name": sub.name,
        "queue": sub.queue,
        "args": list(sub.args),
        "kwargs": sub.kwargs,
        "priority": sub.priority,
        "max_attempts": sub.max_attempts,
        "timeout": sub.timeout,
        "ttl": sub.ttl,
        "retry": sub.retry,
        "deps": deps,
        "input": expr,
    }


# ----- advancing --------------------------------------------------------------------------


def advance(workflow_id: str, *, sweep: bool = False) -> str:
    """Submit ready members, cancel what a stop or a cancel left running; return the state.

    sweep also counts members that reached a final state by a path that does not count
    (workflow_sync.lua reads their records); the reaper sweeps workflows that stayed due.
    """
    keys = _keys(workflow_id)
    client: Any = shards.client(keys.shard)
    seen = client.zscore(keys.workflows_due, workflow_id)
    state = client.hget(keys.workflow(workflow_id), "state")
    if state is None:
        client.zrem(keys.workflows_due, workflow_id)
        return "GONE"
    if state == "RUNNING":
        _release_ready(client, keys, workflow_id)
        state = client.hget(keys.workflow(workflow_id), "state") or "GONE"
    unfinished: list[tuple[int, str, str]] = []
    if sweep or state in ("FAILED", "CANCELLED"):
        unfinished = _unfinished(client, keys, workflow_id)
    if state in ("FAILED", "CANCELLED") and unfinished:
        _cancel_members(client, keys, workflow_id, unfinished, state)
    next_ms = RECHECK_MS if state == "RUNNING" or unfinished else -1
    chunks = [unfinished[i : i + SYNC_CHUNK] for i in range(0, len(unfinished), SYNC_CHUNK)]
    for chunk in chunks or [[]]:
        state = _sync(client, keys, workflow_id, chunk, seen, next_ms).state
    return state


def advance_all(workflow_ids: Iterable[str]) -> None:
    """Advance each workflow, logging (not raising) failures: the reaper tries again."""
    for workflow_id in dict.fromkeys(workflow_ids):
        try:
            advance(workflow_id)
        except Exception:
            log.exception("workflow_id=%s: advance failed; the reaper will retry", workflow_id)


def advance_due(keys: Keys, limit: int = 50, stale_ms: int = STALE_MS) -> int:
    """Advance (with a sweep) the workflows of this shard due stale_ms ago; return how many."""
    client: Any = shards.client(keys.shard)
    now = int(time.time() * 1000)
    due = client.zrangebyscore(keys.workflows_due, "-inf", now - stale_ms, start=0, num=limit)
    for workflow_id in due:
        try:
            advance(workflow_id, sweep=True)
        except Exception:
            log.exception("workflow_id=%s: advance failed", workflow_id)
    return len(due)


def _release_ready(client: Any, keys: Keys, workflow_id: str) -> None:
    """Submit every ready member under its fixed task id, then take it out of the ready set."""
    wk = keys.workflow(workflow_id)
    ready = sorted(int(m) for m in client.smembers(keys.workflow_ready(workflow_id)))
    for start in range(0, len(ready), RELEASE_BATCH):
        batch = ready[start : start + RELEASE_BATCH]
        specs = client.hmget(wk, [f"spec:{m}" for m in batch] + [f"t:{m}" for m in batch])
        parsed = [codec.loads(s) for s in specs[: len(batch)]]
        inputs = _inputs(client, wk, parsed)
        subs = [
            _submission(spec, m, task_id, workflow_id, inputs)
            for m, spec, task_id in zip(batch, parsed, specs[len(batch) :], strict=True)
        ]
        outcomes: list[Any] = [None] * len(subs)
        try:
            outcomes = submit_many(subs)
        except BulkSubmitError as exc:  # invalid (e.g. inputs too large): nothing was submitted
            _fail_refused(client, keys, workflow_id, batch, subs, exc.errors)
            keep = [i for i in range(len(subs)) if i not in exc.errors]
            batch, subs = [batch[i] for i in keep], [subs[i] for i in keep]
            outcomes = submit_many(subs) if subs else []
        accepted = [
            m for m, out in zip(batch, outcomes, strict=True) if not isinstance(out, SubmitError)
        ]
        for m, out in zip(batch, outcomes, strict=True):
            if isinstance(out, SubmitError):
                log.warning("workflow_id=%s member=%s: not submitted yet: %s", workflow_id, m, out)
        if accepted:
            pipe = client.pipeline(transaction=True)
            pipe.hset(wk, mapping={f"q:{m}": 1 for m in accepted})
            pipe.srem(keys.workflow_ready(workflow_id), *accepted)
            pipe.execute()


def _fail_refused(
    client: Any,
    keys: Keys,
    workflow_id: str,
    batch: list[int],
    subs: list[Submission],
    errors: dict[int, DtqError],
) -> None:
    """Count members whose submission was refused as FAILED, with the refusal as error."""
    members = [(batch[i], str(subs[i].task_id), subs[i].queue) for i in errors]
    refused = {
        str(subs[i].task_id): codec.dumps({"class": type(exc).__name__, "message": str(exc)})
        for i, exc in errors.items()
    }
    for m, task_id, _ in members:
        log.warning("workflow_id=%s member=%s: refused: %s", workflow_id, m, refused[task_id])
    _sync(client, keys, workflow_id, members, None, RECHECK_MS, refused)
    client.srem(keys.workflow_ready(workflow_id), *[m for m, _, _ in members])


def _inputs(client: Any, wk: str, specs: list[dict[str, Any]]) -> dict[int, Any]:
    """Return the value each input member stands for: its result, or a failure marker."""
    needed = sorted({m for spec in specs for m in expression_members(spec.get("input"))})
    if not needed:
        return {}
    names = [f"{p}:{m}" for m in needed for p in ("s", "r", "e", "t")]
    values = client.hmget(wk, names)
    out: dict[int, Any] = {}
    for i, m in enumerate(needed):
        state, result, error, task_id = values[4 * i : 4 * i + 4]
        if state == "SUCCEEDED":
            out[m] = codec.loads(result) if result else None
        else:
            failure = {"task": task_id, "state": state or "", "error": None}
            if error:
                try:
                    failure["error"] = codec.loads(error)
                except ValueError:
                    failure["error"] = {"message": error}
            out[m] = {FAILED_MARK: failure}
    return out


def resolve(expr: Any, values: dict[int, Any]) -> Any:
    """Return a result expression with each member index replaced by its value."""
    if isinstance(expr, int):
        return values.get(expr)
    return [resolve(part, values) for part in expr]


def _submission(
    spec: dict[str, Any], member: int, task_id: str, workflow_id: str, inputs: dict[int, Any]
) -> Submission:
    args = list(spec["args"])
    if spec.get("input") is not None:
        args.insert(0, resolve(spec["input"], inputs))
    return Submission(
        name=spec["name"],
        queue=spec["queue"],
        args=args,
        kwargs=spec["kwargs"],
        priority=spec["priority"],
        max_attempts=spec["max_attempts"],
        timeout=spec["timeout"],
        ttl=spec["ttl"],
        retry=spec["retry"],
        task_id=task_id,
        workflow=workflow_id,
        workflow_member=member,
    )


def _unfinished(client: Any, keys: Keys, workflow_id: str) -> list[tuple[int, str, str]]:
    """Return (member, task id, queue) of submitted members with no final state counted."""
    data = client.hgetall(keys.workflow(workflow_id))
    out = []
    for name in data:
        if name.startswith("q:"):
            m = int(name[2:])
            if f"s:{m}" not in data:
                queue = codec.loads(data[f"spec:{m}"])["queue"]
                out.append((m, data[f"t:{m}"], queue))
    return sorted(out)


def _cancel_members(
    client: Any, keys: Keys, workflow_id: str, members: list[tuple[int, str, str]], state: str
) -> None:
    """Cancel (or ask to stop) members still waiting or running after a stop or a cancel."""
    reason = "workflow cancelled" if state == "CANCELLED" else "workflow stopped by a failure"
    for m, task_id, queue in members:
        current = client.hmget(keys.task(task_id), "state", "queue", "cancel")
        if current[0] is None or current[0] in TERMINAL_STATES or current[2] == "1":
            continue
        if state == "FAILED":  # a stop, not an operator: a resume releases it again (wf_note)
            client.hset(keys.workflow(workflow_id), f"x:{m}", 1)
        cancel_task_in_workflow(
            client, keys, task_id, current[1] or queue, (workflow_id, m), reason
        )


def cancel_task_in_workflow(
    client: Any, keys: Keys, task_id: str, queue: str, place: tuple[str, int], reason: str
) -> gateway.CancelResult:
    """Cancel one task, counting it at place (workflow id, member) when it ends there."""
    ref = layout.TaskRef(task_id, queue, client.hget(keys.task(task_id), "idem") or "")
    return gateway.cancel(client, keys, ref, reason, place)


def _sync(
    client: Any,
    keys: Keys,
    workflow_id: str,
    members: list[tuple[int, str, str]],
    seen: float | None,
    next_ms: int,
    refused: dict[str, str] | None = None,
) -> gateway.WorkflowSynced:
    """Run workflow_sync.lua; refused maps task ids never submitted to their error JSON."""
    return gateway.workflow_sync(client, keys, workflow_id, members, seen, next_ms, refused)


def places_of(keys: Keys, task_ids: Sequence[str]) -> list[tuple[str, int]]:
    """Return each task's (workflow id, member index) from its payload, in one round trip."""
    client: Any = shards.client(keys.shard)
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hget(keys.task(task_id), "payload")
    return [member_of(payload or "") for payload in pipe.execute()]


# ----- cancelling -------------------------------------------------------------------------


def cancel(workflow_id: str) -> str:
    """Cancel a workflow: nothing more is submitted, waiting and running members are cancelled.

    Return the state it had ('RUNNING' or 'FAILED' when it was cancelled now; a finished
    workflow is left alone and its state returned).
    """
    keys = _keys(check_id(workflow_id))
    client: Any = shards.client(keys.shard)
    wk = keys.workflow(workflow_id)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(wk)  # a member finishing now may finish the workflow
                state = pipe.hget(wk, "state")
                if state is None:
                    raise WorkflowNotFound(f"no workflow {workflow_id!r} (or past retention)")
                if state in ("SUCCEEDED", "CANCELLED"):
                    return str(state)
                pipe.multi()
                pipe.hset(wk, mapping={"state": "CANCELLED", "updated_at": int(time.time() * 1000)})
                pipe.expire(wk, int(dtq_settings.RETENTION))
                pipe.zadd(keys.workflows_due, {workflow_id: int(time.time() * 1000)})
                pipe.execute()
                break
            except WatchError:  # the workflow changed meanwhile: look again
                continue
    advance(workflow_id)
    return str(state)


# ----- reading ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    """One member as the read side shows it."""

    index: int
    task_id: str
    name: str
    queue: str
    state: str  # the task's state, or WAITING (not submitted yet), or CANCELLED (never will be)
    deps: list[int]
    result: Any = None
    error: Any = None
    submitted: bool = False  # its task record exists (or existed): the task page has it


@dataclass(frozen=True, slots=True)
class Workflow:
    """A workflow as the read side shows it."""

    id: str
    state: str
    policy: str
    label: str
    total: int
    done: int
    failed: int
    created_at: int
    updated_at: int
    members: list[Member]
    result: Any  # the workflow's result expression resolved (None until it succeeded)


def read(workflow_id: str, *, live_limit: int = 1000) -> Workflow:
    """Return a workflow and its members; live states of at most live_limit running members."""
    keys = _keys(check_id(workflow_id))
    client: Any = shards.client(keys.shard)
    data = client.hgetall(keys.workflow(workflow_id))
    if not data:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} (never created, or past retention)")
    total, state = int(data["total"]), data["state"]
    live = [m for m in range(total) if f"q:{m}" in data and f"s:{m}" not in data][:live_limit]
    pipe = client.pipeline(transaction=False)
    for m in live:
        pipe.hget(keys.task(data[f"t:{m}"]), "state")
    live_states = dict(zip(live, pipe.execute(), strict=True))
    members = [_member(data, m, state, live_states) for m in range(total)]
    values = {m.index: m.result for m in members}
    result = resolve(codec.loads(data["result"]), values) if state == "SUCCEEDED" else None
    return Workflow(
        id=workflow_id,
        state=state,
        policy=data.get("policy", "stop"),
        label=data.get("label", ""),
        total=total,
        done=int(data.get("done", 0)),
        failed=int(data.get("bad", 0)),
        created_at=int(data.get("created_at", 0)),
        updated_at=int(data.get("updated_at", 0)),
        members=members,
        result=result,
    )


def _member(data: dict[str, str], m: int, wstate: str, live: dict[int, str | None]) -> Member:
    spec = codec.loads(data[f"spec:{m}"])
    state = data.get(f"s:{m}")
    if state is None:
        if f"q:{m}" in data:
            state = live.get(m) or "QUEUED"
        else:
            state = "WAITING" if wstate == "RUNNING" else "CANCELLED"
    result = data.get(f"r:{m}")
    error = data.get(f"e:{m}")
    return Member(
        index=m,
        task_id=data[f"t:{m}"],
        name=spec["name"],
        queue=spec["queue"],
        state=state,
        deps=spec["deps"],
        result=codec.loads(result) if result else None,
        error=codec.loads(error) if error else None,
        submitted=f"q:{m}" in data,
    )
