"""Operator actions: cancel, pause/resume, DLQ replay/discard/purge, queue purge.

Every action changes Redis through Lua only (one script call, or one per bounded batch for bulk
actions) and writes exactly one audit row (dtq.models.AuditEntry) naming its actor. The
management commands, the admin and the REST API call these functions and never send Redis
commands themselves. Reads (DLQ lists, purge previews) write no audit row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import cursors, gateway, ids, layout, limits, read_side, shards, workflows
from dtq.engine.actions import AuditAction
from dtq.engine.audit import Actor, Report, audited
from dtq.engine.declared import check_declared
from dtq.engine.dlq import (
    DISCARDED,
    REPLAYED,
    BulkResult,
    DlqFilter,
    DlqProgress,
    bulk,
    discard_entries,
    replay_entries,
)
from dtq.engine.errors import (
    DtqError,
    InvalidOperation,
    NotInDeadLetterQueue,
    TaskAlreadyFinished,
    TaskNotFound,
)
from dtq.engine.keys import Keys, check_queue_name
from dtq.engine.purge import Purge, PurgePreview, PurgeProgress, PurgeResult, preview
from dtq.engine.read_side import DlqEntry

__all__ = [
    "Actor",
    "BulkResult",
    "DlqFilter",
    "PurgePreview",
    "PurgeResult",
    "cancel",
    "cancel_workflow",
    "discard",
    "discard_many",
    "pause_queue",
    "preview_purge",
    "purge_dlq",
    "purge_queue",
    "queue_limits",
    "replay",
    "replay_many",
    "resume_queue",
    "set_queue_limits",
]

CANCEL_ATTEMPTS = 3  # a task replayed into another queue mid-cancel is looked up again
REPLAY_OK = REPLAYED


def _queue(name: str) -> str:
    try:
        return check_queue_name(name)
    except ValueError as exc:
        raise InvalidOperation(str(exc)) from None


def _task_id(task_id: str) -> str:
    # Checked before the audit row: a malformed id never reaches the log or the database.
    if not ids.is_valid(task_id):
        raise InvalidOperation(
            f"invalid task id {task_id[:40]!r}: a task id is 22 characters of 0-9 and a-z"
        )
    return task_id


def _target(name: str) -> str:
    """Return a queue an action may create entries in: a declared one (DTQ['QUEUES'])."""
    return check_declared(_queue(name))


def _reason(reason: str, required: bool = False) -> str:
    text = (reason or "").strip()
    if required and not text:
        raise InvalidOperation("a reason is required for this action")
    return text


def _keys() -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, 0)


def on_every_shard[T](report: Report, act: Callable[[Any, Keys], T]) -> list[T]:
    """Run act(client, keys) on every shard, shard 0 first; return what each answered.

    Each call is safe to send again, so an action that failed part way is completed by
    running it again; its audit row then says how many shards were done before the error.
    """
    answers: list[T] = []
    try:
        for keys in shards.every():
            answers.append(act(shards.client(keys.shard), keys))
    except BaseException:
        report.parameters.update(shards=shards.count(), shards_done=len(answers))
        raise
    return answers


# ----- cancel ----------------------------------------------------------------------------


def cancel(task_id: str, *, actor: Actor, reason: str = "") -> str:
    """Cancel a task: 'cancelled' if it was waiting, 'requested' if it is running.

    A running task ends CANCELLED only once its handler stops by raising TaskCancelled (async
    handlers are interrupted for it); a handler that returns normally keeps its normal outcome.
    Raises TaskNotFound, or TaskAlreadyFinished for a task in a final state.
    """
    reason = _reason(reason)
    task_id = _task_id(task_id)
    with audited(actor, AuditAction.CANCEL, task_id=task_id, reason=reason) as report:
        outcome = cancel_task(task_id, reason or "cancelled by an operator", report)
        report.affected = 1
        report.parameters["outcome"] = outcome
        return outcome


def cancel_task(task_id: str, reason: str, report: Report) -> str:
    """Cancel one task inside an audited action (its row counts it); return the outcome."""
    keys = shards.of_task(task_id)
    client: Any = shards.client(keys.shard)  # decode_responses: replies are str
    for _ in range(CANCEL_ATTEMPTS):
        # The call must declare the task's keys (Redis Cluster), so read which they are; the
        # loop only repeats when a replay moved the task between read and call.
        queue, idem, payload = client.hmget(keys.task(task_id), "queue", "idem", "payload")
        if not queue:
            raise TaskNotFound(f"no task {task_id!r} (never created, or past retention)")
        report.queue = queue
        workflow_id, member = workflows.member_of(payload or "")
        ref = layout.TaskRef(task_id, queue, idem or "")
        place = (workflow_id, member) if workflow_id else None
        kind, detail = gateway.cancel(client, keys, ref, reason, place)
        if workflow_id and kind == "cancelled":
            workflows.advance_all([workflow_id])  # a dependent may be ready (policy continue)
        if kind == "finished":
            raise TaskAlreadyFinished(task_id, detail)
        if kind == "missing":
            raise TaskNotFound(f"no task {task_id!r} (never created, or past retention)")
        if kind != "moved":
            return kind
    raise DtqError(f"task {task_id} keeps moving between queues; try again")


def cancel_workflow(workflow_id: str, *, actor: Actor, reason: str = "") -> str:
    """Cancel a workflow: nothing more starts, waiting and running members are cancelled.

    Return the state it had: RUNNING or FAILED (cancelled now), or SUCCEEDED / CANCELLED
    (nothing done). Raises WorkflowNotFound.
    """
    reason = _reason(reason)
    workflows.check_id(workflow_id)
    with audited(actor, AuditAction.CANCEL, task_id=workflow_id, reason=reason) as report:
        report.parameters["workflow"] = workflow_id
        before = workflows.cancel(workflow_id)
        report.affected = 1 if before in ("RUNNING", "FAILED") else 0
        report.parameters["outcome"] = before
        return before


# ----- pause / resume --------------------------------------------------------------------


def pause_queue(queue: str, *, actor: Actor, reason: str = "") -> bool:
    """Stop workers reading a queue (submissions are still accepted); False if already paused."""
    return _set_paused(queue, True, actor, reason)


def resume_queue(queue: str, *, actor: Actor, reason: str = "") -> bool:
    """Let workers read a paused queue again; False if it was not paused."""
    return _set_paused(queue, False, actor, reason)


def _set_paused(queue: str, paused: bool, actor: Actor, reason: str) -> bool:
    reason = _reason(reason)
    action = AuditAction.PAUSE if paused else AuditAction.RESUME
    with audited(actor, action, queue=queue, reason=reason) as report:
        if _queue(queue) not in read_side.queue_names():  # pausing must not create a queue
            _target(queue)
        # Every shard holds its part of the queue, and each has its own paused set.
        answers = on_every_shard(
            report, lambda client, keys: gateway.pause(client, keys, queue, paused, reason)
        )
        changed = any(answers)
        report.affected = int(changed)
        if not changed:
            report.detail = f"queue was already {'paused' if paused else 'running'}"
        return bool(changed)


# ----- flow control ----------------------------------------------------------------------

UNSET: Any = object()  # a limit the caller leaves as it is


def set_queue_limits(
    queue: str,
    *,
    actor: Actor,
    max_concurrency: int | None = UNSET,
    rate: str | None = UNSET,
    burst: int | None = None,
    reason: str = "",
) -> read_side.QueueLimits:
    """Set or clear (None) a queue's own concurrency and rate limits; return them after.

    Waiters the new concurrency limit has room for are woken (all of them when it is cleared).
    Bad values raise InvalidOperation, before the audit row, naming what is wrong.
    """
    reason = _reason(reason)
    _queue(queue)
    current = read_side.queue_overview(queue)["limits"]
    conc = current["max_concurrency"] if max_concurrency is UNSET else max_concurrency
    try:
        conc = None if conc is None else limits.check_concurrency(conc)
        if rate is UNSET:
            encoded = _current_rate(queue) if burst is None else _rebursted(queue, burst)
        else:
            encoded = "" if rate is None else limits.parse_rate(rate, burst).encoded()
    except ValueError as exc:
        raise InvalidOperation(str(exc)) from None
    params = {"max_concurrency": conc, "rate": read_side.rate_text(encoded)}
    with audited(
        actor, AuditAction.QUEUE_LIMIT, queue=queue, reason=reason, parameters=params
    ) as report:
        if queue not in read_side.queue_names():
            _target(queue)

        def apply(client: Any, keys: Keys) -> None:
            change = True
            for _ in range(1000):  # each call wakes a bounded number of waiters
                after = gateway.set_limits(client, keys, queue, conc, encoded, change)
                change = False
                if not after.waiting or (conc is not None and after.held >= conc):
                    break

        on_every_shard(report, apply)  # a queue limit holds on each shard (flow-control.md)
        report.affected = 1
    return read_side.queue_overview(queue)["limits"]


def queue_limits(queue: str) -> read_side.QueueLimits:
    """Return a queue's own limits and their use (a read: no audit row)."""
    return read_side.queue_overview(_queue(queue))["limits"]


def _current_rate(queue: str) -> str:
    # Every shard has the same setting (set_queue_limits sets them all): HOME's is read.
    rate = shards.client(shards.HOME).hget(shards.keys(shards.HOME).limits(queue), "rate")
    return str(rate or "")


def _rebursted(queue: str, burst: int) -> str:
    rate = _current_rate(queue)
    if not rate:
        raise ValueError("burst needs a rate: give the rate too")
    count, period, _ = rate.split("|")
    return limits.Rate(int(count), int(period), limits.check_burst(burst)).encoded()


# ----- DLQ -------------------------------------------------------------------------------


def _entry(task_id: str, queue: str | None) -> DlqEntry:
    if queue is not None:
        _queue(queue)
    entry = read_side.find_dlq_entry(task_id, queue) if ids.is_valid(task_id) else None
    if entry is None:
        raise NotInDeadLetterQueue(task_id)
    return entry


def replay(
    task_id: str,
    *,
    actor: Actor,
    to_queue: str | None = None,
    queue: str | None = None,
    reason: str = "",
) -> str:
    """Put one dead-lettered task back on its queue (or on to_queue), attempts from 1.

    Works after the task record expired (a fresh record with the same id is built from the
    DLQ entry: 'recreated'; else 'replayed'). `queue` narrows the search for such an entry.
    """
    reason = _reason(reason)
    task_id = _task_id(task_id)
    params = {"to_queue": to_queue} if to_queue else {}
    with audited(
        actor, AuditAction.REPLAY, task_id=task_id, reason=reason, parameters=params
    ) as report:
        if to_queue is not None:
            _target(to_queue)
        entry = _entry(task_id, queue)
        report.queue = entry["queue"]
        status = replay_entries(entry["queue"], [entry], to_queue)[0]
        if status not in REPLAY_OK:
            raise NotInDeadLetterQueue(task_id, _why(status))
        report.affected = 1
        report.parameters["outcome"] = status
        return status


def _why(status: str) -> str:
    if status == "gone":
        return " any more (replayed or discarded meanwhile)"
    return " (its record changed since it was dead-lettered)"


def replay_many(
    queue: str,
    *,
    actor: Actor,
    flt: DlqFilter | None = None,
    to_queue: str | None = None,
    reason: str = "",
    progress: DlqProgress | None = None,
    after: str | None = None,
) -> BulkResult:
    """Replay the entries of a queue's DLQ that match flt, in batches, after entry `after`.

    With flt.limit the result says whether matching entries may remain (`more`) and where to
    continue (`next_cursor`, passed back as `after`).
    """
    flt = flt or DlqFilter()
    params = {"filter": flt.as_dict(), "to_queue": to_queue, "bulk": True, "after": after}
    with audited(
        actor, AuditAction.REPLAY, queue=queue, reason=_reason(reason), parameters=params
    ) as rep:
        _queue(queue)
        if to_queue is not None:
            _target(to_queue)

        def act(entries: list[DlqEntry], shard: int) -> list[str]:
            return replay_entries(queue, entries, to_queue, shard=shard)

        result = BulkResult()
        try:
            track = _tracking(rep, progress)
            bulk(queue, flt, act, REPLAY_OK, track, result, _after(after))
        finally:  # also when a later batch failed: the row counts what was really done
            _record_bulk(rep, result)
        return result


def _after(cursor: str | None) -> str:
    """Return a bulk DLQ action's cursor ('<entry id>[@<shard>]') once checked, or '-'."""
    try:
        return read_side.entry_cursor(*read_side.parse_entry_cursor(cursor)) if cursor else "-"
    except ValueError as exc:
        raise InvalidOperation(str(exc)) from None


def _tracking(report: Report, progress: DlqProgress | None) -> DlqProgress:
    """Return a progress callback that also counts each batch into the audit row."""

    def track(result: BulkResult) -> None:
        report.count(result.done)
        if progress is not None:
            progress(result)

    return track


def _record_bulk(report: Report, result: BulkResult) -> None:
    report.affected = result.done
    report.parameters.update(statuses=result.statuses, more=result.more)


def discard(task_id: str, *, actor: Actor, queue: str | None = None, reason: str = "") -> None:
    """Remove one task's entry from its DLQ for good (its record stays until retention)."""
    reason = _reason(reason)
    task_id = _task_id(task_id)
    with audited(actor, AuditAction.DISCARD, task_id=task_id, reason=reason) as report:
        entry = _entry(task_id, queue)
        report.queue = entry["queue"]
        status = discard_entries(entry["queue"], [entry], reason)[0]
        if status not in DISCARDED:
            raise NotInDeadLetterQueue(task_id, _why(status))
        report.affected = 1


def discard_many(
    queue: str,
    *,
    actor: Actor,
    flt: DlqFilter | None = None,
    reason: str = "",
    progress: DlqProgress | None = None,
    after: str | None = None,
) -> BulkResult:
    """Discard the entries of a queue's DLQ that match flt, in batches, after entry `after`."""
    flt = flt or DlqFilter()
    reason = _reason(reason)
    params = {"filter": flt.as_dict(), "bulk": True, "after": after}
    with audited(
        actor, AuditAction.DISCARD, queue=queue, reason=reason, parameters=params
    ) as report:
        _queue(queue)
        return _discard_all(queue, flt, reason, progress, report, _after(after))


def purge_dlq(
    queue: str,
    *,
    actor: Actor,
    reason: str,
    progress: DlqProgress | None = None,
    limit: int | None = None,
) -> BulkResult:
    """Discard the entries of a queue's DLQ that exist when the purge starts (up to limit).

    With a limit, `more` says that entries may remain: purge again to continue.
    """
    reason = _reason(reason, required=True)
    params = {"limit": limit} if limit else {}
    with audited(
        actor, AuditAction.DLQ_PURGE, queue=queue, reason=reason, parameters=params
    ) as report:
        _queue(queue)
        return _discard_all(queue, DlqFilter(limit=limit), reason, progress, report, "-")


def _discard_all(
    queue: str,
    flt: DlqFilter,
    reason: str,
    progress: DlqProgress | None,
    report: Report,
    after: str,
) -> BulkResult:
    def act(entries: list[DlqEntry], shard: int) -> list[str]:
        return discard_entries(queue, entries, reason, shard)

    result = BulkResult()
    try:
        return bulk(queue, flt, act, DISCARDED, _tracking(report, progress), result, after)
    finally:  # also when a later batch failed: the row counts what was really done
        _record_bulk(report, result)


# ----- queue purge -----------------------------------------------------------------------


def preview_purge(queue: str) -> PurgePreview:
    """Count what purge_queue would cancel now, and the running tasks it leaves alone."""
    return preview(_queue(queue))


def purge_queue(
    queue: str,
    *,
    actor: Actor,
    reason: str,
    progress: PurgeProgress | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> PurgeResult:
    """Cancel every waiting task of a queue (reason 'purged'), in batches; never running ones.

    Queued entries and schedule members go, idempotency keys are released, and each task is
    left CANCELLED. Tasks submitted after the purge started are kept. With a limit the purge
    stops after that many tasks and entries; `more` then says to continue with `cursor` set
    to the result's cutoff_ms, which takes the same tasks as the first part.
    """
    reason = _reason(reason, required=True)
    cutoff = _cutoff(cursor)
    params = {"limit": limit, "cursor": cursor} if limit or cursor else {}
    with audited(actor, AuditAction.PURGE, queue=queue, reason=reason, parameters=params) as report:
        _queue(queue)

        def track(result: PurgeResult) -> None:
            report.count(result.purged)  # the row counts batch by batch
            if progress is not None:
                progress(result)

        purge = Purge(queue, reason, track, limit=limit, cutoff_ms=cutoff)
        try:
            return purge.run()
        finally:  # also when a later batch failed: the row counts what was really done
            result = purge.result
            report.affected = result.purged
            report.parameters.update(
                queued=result.queued,
                scheduled=result.scheduled,
                released_keys=result.released_keys,
                entries_removed=result.entries_removed,
                running_left=result.running,
                more=result.more,
            )


def _cutoff(cursor: str | None) -> int | None:
    """Return the cutoff a continued purge keeps, from its cursor (ms, not in the future)."""
    if not cursor:
        return None
    try:
        cutoff = cursors.number(cursor, "purge cursor", int(time.time() * 1000))
    except ValueError as exc:
        raise InvalidOperation(f"{exc} (pass back the cursor a purge returned)") from None
    return cutoff
