"""Edit and replay: correct a failed task's arguments, queue or priority, then run it again.

A dead-lettered task is replayed from its DLQ entry (replay.lua); a FAILED one, which has no
entry, is retried from its record (retry_failed.lua). Either way the edit and the new delivery
are one script call (the record is rewritten just before it is delivered), and one audit row
('replay') records what changed, before and after.
"""

from __future__ import annotations

import inspect
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec, failed, ids, read_side, registry
from dtq.engine.actions import AuditAction
from dtq.engine.audit import Actor, audited
from dtq.engine.declared import check_declared, task_queues
from dtq.engine.dlq import REPLAYED, replay_entries
from dtq.engine.errors import InvalidTaskError, NotInDeadLetterQueue, NotRetryable, TaskNotFound
from dtq.engine.keys import band_of
from dtq.options import check_priority, check_queue

_UNSET: Any = object()
REPLAY_OK = REPLAYED
_CHANGED = "task {} changed while being retried (retried meanwhile?): not retried"


def check_arguments(task: Any, args: Any, kwargs: Any) -> None:
    """Raise InvalidTaskError unless args (a list) and kwargs (an object) fit the task."""
    if not isinstance(args, list):
        raise InvalidTaskError(f"args must be a JSON array, got {type(args).__name__}")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidTaskError("kwargs must be a JSON object")
    lead = [None] if getattr(task, "takes_context", False) else []  # the context argument
    try:
        inspect.signature(task.func).bind(*lead, *args, **kwargs)
    except TypeError as exc:
        message = f"arguments do not fit {task.name}{signature(task)}: {exc}"
        raise InvalidTaskError(message) from None


def signature(task: Any) -> str:
    """Return the task's signature as a caller writes it (without the context argument)."""
    sig = inspect.signature(task.func)
    params = list(sig.parameters.values())
    if getattr(task, "takes_context", False) and params:
        params = params[1:]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def _edit(entry: dict[str, Any], changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (before, after) of the fields the edit changes."""
    payload = entry["payload"] if isinstance(entry.get("payload"), dict) else {}
    before = {
        "args": payload.get("args", []),
        "kwargs": payload.get("kwargs", {}),
        "queue": entry["queue"],
        "priority": entry.get("priority") or 0,
    }
    after = before | {k: v for k, v in changes.items() if v is not _UNSET}
    return before, after


def edit_and_replay(
    task_id: str,
    *,
    actor: Actor,
    args: Any = _UNSET,
    kwargs: Any = _UNSET,
    queue: Any = _UNSET,
    priority: Any = _UNSET,
    reason: str = "",
) -> str:
    """Replay a dead-lettered task with new arguments, queue or priority; return the status.

    The arguments are checked against the task's signature, the queue against the queues it
    accepts, the priority against -100..100; anything wrong raises before Redis changes.
    """
    if not ids.is_valid(task_id):
        raise NotInDeadLetterQueue(task_id)
    changes = {"args": args, "kwargs": kwargs, "queue": queue, "priority": priority}
    with audited(actor, AuditAction.REPLAY, task_id=task_id, reason=reason) as report:
        entry = read_side.find_dlq_entry(task_id)
        if entry is None:
            raise NotInDeadLetterQueue(task_id)
        report.queue = entry["queue"]
        before, after = _edit(dict(entry), changes)
        report.parameters["edit"] = {"before": before, "after": after}
        edit = _checked(entry["name"], after)
        to_queue = after["queue"] if after["queue"] != entry["queue"] else None
        status = replay_entries(entry["queue"], [entry], to_queue, [edit])[0]
        if status not in REPLAY_OK:
            raise NotInDeadLetterQueue(task_id, " any more (replayed or discarded meanwhile)")
        report.affected = 1
        report.parameters["outcome"] = status
        return status


def edit_and_retry(
    task_id: str,
    *,
    actor: Actor,
    args: Any = _UNSET,
    kwargs: Any = _UNSET,
    queue: Any = _UNSET,
    priority: Any = _UNSET,
    reason: str = "",
) -> str:
    """Retry a FAILED task (it has no DLQ entry) with new arguments, queue or priority.

    Checked as edit_and_replay checks, before Redis changes; with no changes it is a plain
    retry. Attempts restart at 1 and the history is kept. Returns 'retried'.
    """
    if not ids.is_valid(task_id):
        raise TaskNotFound(f"invalid task id {task_id[:40]!r}")
    changes = {"args": args, "kwargs": kwargs, "queue": queue, "priority": priority}
    params = {"state": "FAILED"}
    with audited(
        actor, AuditAction.REPLAY, task_id=task_id, reason=reason, parameters=params
    ) as report:
        found = failed.find([task_id])  # read first: its finished_at fences the script call
        record = read_side.get_task(task_id)
        if record is None:
            raise TaskNotFound(f"no task {task_id!r} (never created, or past retention)")
        if record["state"] != "FAILED":
            raise NotRetryable(task_id, str(record["state"]))
        if not found:
            raise NotRetryable(task_id, "FAILED", _CHANGED.format(task_id))
        report.queue = record["queue"]
        before, after = _edit(record, changes)
        report.parameters["edit"] = {"before": before, "after": after}
        edit = _checked(record["name"], after)
        to_queue = after["queue"] if after["queue"] != record["queue"] else None
        status = failed.retry(found[0].queue, found, to_queue, [edit])[0]
        if status not in failed.RETRY_OK:
            raise NotRetryable(task_id, "FAILED", _CHANGED.format(task_id))
        report.affected = 1
        report.parameters["outcome"] = status
        return status


def _checked(name: str, after: dict[str, Any]) -> str:
    """Validate the edited fields; return the edit JSON of replay.lua and retry_failed.lua."""
    task = registry.get(name)
    if task is None:
        raise InvalidTaskError(f"no task named {name!r} is registered here: nothing to check")
    check_arguments(task, after["args"], after["kwargs"])
    priority = check_priority(after["priority"])
    check_queue(after["queue"])
    allowed = task_queues(task)
    if after["queue"] not in allowed:
        raise InvalidTaskError(f"task {name!r} accepts only the queues: {', '.join(allowed)}")
    check_declared(after["queue"])
    limit = dtq_settings.MAX_PAYLOAD_BYTES
    payload = codec.encode_payload(after["args"], after["kwargs"], limit)  # or PayloadError
    return codec.dumps({"payload": payload, "priority": priority, "band": band_of(priority)})
