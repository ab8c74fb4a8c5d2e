"""Bulk actions by filter: plan (a dry-run count), then run in bounded batches in the background.

plan() picks the tasks a bulk action would touch, from ticked ids or a search query
(records.query), and stores them in a job hash with a TTL; its count is the dry run. start()
runs the job in a daemon thread of this process, batch by batch, under ONE audit row that
names the filter, the count and the outcome; progress() reads the job's hash. The snapshot of
ids makes the count shown before the action the set the action works on: tasks that changed
state meanwhile are counted as skipped, never acted on twice. A retry replays dead-lettered
tasks from their DLQ entries and retries FAILED ones (which have none) from their records.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connections

from dtq.conf import dtq_settings
from dtq.engine import failed, ids, ops, shards
from dtq.engine.actions import AuditAction
from dtq.engine.audit import Actor, Report, audited
from dtq.engine.connection import get_client
from dtq.engine.dlq import BATCH, DISCARDED, discard_entries, replay_entries
from dtq.engine.errors import DtqError, InvalidOperation, ReadBudgetExceeded
from dtq.engine.keys import Keys, check_queue_name
from dtq.engine.read_side import find_dlq_entry, get_task
from dtq.engine.read_side import query as search
from dtq.engine.read_side.budget import read_budget
from dtq.engine.state import TaskState

JOB_TTL = 24 * 3600  # seconds a job's state stays readable after its last change
MAX_PAGES = 200  # search pages a plan reads at most (each within its own read budget)
PAGE = 500
MIN_PAGE_COST = 10  # read-budget commands below which another search page is not worth it

# action -> (audit action, the states it acts on)
ACTIONS: dict[str, tuple[AuditAction, tuple[TaskState, ...]]] = {
    "retry": (AuditAction.REPLAY, (TaskState.DEAD_LETTERED, TaskState.FAILED)),
    "cancel": (
        AuditAction.CANCEL,
        (TaskState.PENDING, TaskState.QUEUED, TaskState.RETRYING, TaskState.RUNNING),
    ),
    "replay": (AuditAction.REPLAY, (TaskState.DEAD_LETTERED,)),
    "discard": (AuditAction.DISCARD, (TaskState.DEAD_LETTERED,)),
}


@dataclass(slots=True)
class Plan:
    """What a bulk action would touch: the dry run shown before it runs."""

    job_id: str
    action: str
    count: int
    more: bool  # stopped at BULK_REQUEST_LIMIT or at the search's page bound: run again after
    skipped: dict[str, int]  # matching tasks left out, by why (e.g. "state SUCCEEDED")


def _keys() -> Keys:
    """Return the keys of HOME: jobs and schedules are process-wide, not sharded."""
    return shards.keys(shards.HOME)


def _limit() -> int:
    return dtq_settings.BULK_REQUEST_LIMIT


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise InvalidOperation(f"unknown bulk action {action!r}: one of {', '.join(ACTIONS)}")


def plan(
    action: str,
    *,
    query: str = "",
    task_ids: list[str] | None = None,
    narrow: dict[str, str] | None = None,
) -> Plan:
    """Pick the tasks `action` would touch (ticked ids, else everything matching query).

    `narrow` holds the admin's separate filters of its task list (queue, state, task) that
    hold besides the query, as on that list.
    """
    _check_action(action)
    if task_ids is not None and query:
        raise InvalidOperation("give either ticked task ids or a query, not both")
    narrow = {k: v for k, v in (narrow or {}).items() if v}
    skipped: dict[str, int] = {}
    if task_ids is not None:
        chosen, more = _from_ids(task_ids, action, skipped), False
    else:
        chosen, more = _from_query(query, narrow, action, skipped)
    described = " ".join([query, *(f"[{k}={v}]" for k, v in sorted(narrow.items()))]).strip()
    job_id = uuid.uuid4().hex
    mapping = {
        "action": action,
        "state": "planned",
        "query": described if task_ids is None else "",
        "ticked": "1" if task_ids is not None else "0",
        "count": len(chosen),
        "done": 0,
        "skipped": 0,
        "ids": json.dumps(chosen),
        "outcome": "",
    }
    pipe: Any = get_client().pipeline()  # MULTI: the hash never exists without its TTL
    pipe.hset(_keys().bulk_job(job_id), mapping=mapping)
    pipe.expire(_keys().bulk_job(job_id), JOB_TTL)
    pipe.execute()
    return Plan(job_id, action, len(chosen), more, skipped)


def _eligible(record: dict[str, Any], action: str, skipped: dict[str, int]) -> bool:
    state = TaskState(record["state"])
    if state in ACTIONS[action][1]:
        return True
    why = f"state {state}"
    skipped[why] = skipped.get(why, 0) + 1
    return False


def _from_ids(task_ids: list[str], action: str, skipped: dict[str, int]) -> list[str]:
    if len(task_ids) > _limit():
        raise InvalidOperation(f"at most {_limit()} ticked tasks per action (BULK_REQUEST_LIMIT)")
    chosen: list[str] = []
    for task_id in dict.fromkeys(task_ids):
        if not ids.is_valid(task_id):
            raise InvalidOperation(f"invalid task id {task_id[:40]!r}")
        record = get_task(task_id)
        if record is None:
            skipped["not found"] = skipped.get("not found", 0) + 1
        elif _eligible(record, action, skipped):
            chosen.append(task_id)
    return chosen


def _from_query(
    text: str, narrow: dict[str, str], action: str, skipped: dict[str, int]
) -> tuple[list[str], bool]:
    states = ACTIONS[action][1]
    try:
        parsed = search.parse(text)
        queue = check_queue_name(narrow["queue"]) if "queue" in narrow else None
        if "state" in narrow:
            TaskState(narrow["state"])  # an unknown state: ValueError
    except ValueError as exc:  # QueryError is one
        raise InvalidOperation(f"bad query: {exc}") from None
    parsed.narrow(state=narrow.get("state"), name=narrow.get("task"))
    if not parsed.states:  # read only the indexes the action can act on
        parsed.states = [str(s) for s in states]
    chosen: list[str] = []
    cursor: str | None = None
    # The whole dry run reads within one read budget (the request's, when there is one): a
    # search it cannot finish within that says `more` and is planned again afterwards.
    with read_budget() as budget:
        for _ in range(MAX_PAGES):
            if budget.left < MIN_PAGE_COST:
                return chosen, True
            try:
                page = search.run(parsed, PAGE, cursor, queues=[queue] if queue else None)
            except ReadBudgetExceeded:
                return chosen, True
            if _take(page["tasks"], action, skipped, chosen):
                return chosen, True
            cursor = page["next_cursor"]
            if cursor is None:
                return chosen, False
    return chosen, True


def _take(
    found: list[dict[str, Any]], action: str, skipped: dict[str, int], chosen: list[str]
) -> bool:
    """Add the eligible tasks of one search page to chosen; True once the limit is reached."""
    for record in found:
        if _eligible(record, action, skipped):
            chosen.append(record["id"])
            if len(chosen) == _limit():
                return True
    return False


def start(job_id: str, *, actor: Actor, reason: str = "", action: str | None = None) -> None:
    """Run a planned job in a daemon thread; raise InvalidOperation if it is not planned.

    `action`, when given, must be the job's (a surface checked the permission of that one).
    """
    key = _keys().bulk_job(job_id)
    client: Any = get_client()
    planned, started = client.hmget(key, "action", "started")
    if planned is None or (action is not None and planned != action):
        raise InvalidOperation(f"no planned {action or 'bulk'} job {job_id[:40]!r} (or expired)")
    # Only one start wins (HSETNX): a resent or concurrent start is refused.
    if started or not client.hsetnx(key, "started", "1"):
        raise InvalidOperation(f"bulk job {job_id[:40]!r} was already started")
    client.hset(key, "state", "running")
    thread = threading.Thread(
        target=_run, args=(job_id, actor, reason), name=f"dtq-bulk-{job_id[:8]}", daemon=True
    )
    thread.start()


def progress(job_id: str) -> dict[str, Any] | None:
    """Return a job's state, count, done, skipped and outcome, or None when unknown."""
    data: dict[str, str] = get_client().hgetall(_keys().bulk_job(job_id))  # type: ignore[assignment]
    if not data:
        return None
    return {
        "id": job_id,
        "action": data["action"],
        "state": data["state"],
        "query": data["query"],
        "count": int(data["count"]),
        "done": int(data["done"]),
        "skipped": int(data["skipped"]),
        "outcome": data["outcome"],
    }


def _run(job_id: str, actor: Actor, reason: str) -> None:
    key = _keys().bulk_job(job_id)
    client: Any = get_client()
    data = client.hgetall(key)
    action = data["action"]
    audit_action, _ = ACTIONS[action]
    task_ids: list[str] = json.loads(data["ids"])
    params = {
        "bulk": True,
        "bulk_action": action,
        "filter": data["query"] if data["ticked"] == "0" else "ticked rows",
        "count": len(task_ids),
        "job": job_id,
    }
    outcome = "ok"
    try:
        with audited(actor, audit_action, reason=reason, parameters=params) as report:
            done, skipped = 0, 0
            for start_at in range(0, len(task_ids), BATCH):
                batch = task_ids[start_at : start_at + BATCH]
                ok = _batch(action, batch, reason, report)
                done, skipped = done + ok, skipped + len(batch) - ok
                report.count(done)
                client.hset(key, mapping={"done": done, "skipped": skipped})
                client.expire(key, JOB_TTL)
            report.affected = done
            report.parameters.update(done=done, skipped=skipped)
    except DtqError as exc:
        outcome = f"refused: {exc}"
    except Exception as exc:  # the thread has no caller: the job's hash carries what happened
        outcome = f"error: {type(exc).__name__}: {exc}"
    finally:
        client.hset(key, mapping={"state": "finished", "outcome": outcome})
        client.expire(key, JOB_TTL)
        connections.close_all()  # this thread's database connections


def _batch(action: str, task_ids: list[str], reason: str, report: Report) -> int:
    """Act on one batch; return how many tasks were acted on (others changed meanwhile)."""
    if action == "cancel":
        return sum(_cancel_one(t, reason, report) for t in task_ids)
    ok = 0
    if action == "retry":
        found = failed.find(task_ids)
        ok += _retry_failed(found)
        done = {t.id for t in found}
        task_ids = [t for t in task_ids if t not in done]
    by_queue: dict[str, list[Any]] = {}
    for task_id in task_ids:
        entry = find_dlq_entry(task_id)
        if entry is not None:
            by_queue.setdefault(entry["queue"], []).append(entry)
    for queue, entries in by_queue.items():
        if action == "discard":
            replies = discard_entries(queue, entries, reason or "discarded in bulk")
            ok += sum(1 for status in replies if status in DISCARDED)
        else:
            replies = replay_entries(queue, entries)
            ok += sum(r in ops.REPLAY_OK for r in replies)
    return ok


def _retry_failed(found: list[failed.FailedTask]) -> int:
    """Retry FAILED tasks (no DLQ entry), one script call per queue; count the retried."""
    by_queue: dict[str, list[failed.FailedTask]] = {}
    for task in found:
        by_queue.setdefault(task.queue, []).append(task)
    replies = [r for queue, batch in by_queue.items() for r in failed.retry(queue, batch)]
    return sum(r in failed.RETRY_OK for r in replies)


def _cancel_one(task_id: str, reason: str, report: Report) -> int:
    try:
        outcome = ops.cancel_task(task_id, reason or "cancelled by an operator", report)
    except DtqError:  # finished or gone since the plan: skipped
        return 0
    finally:
        report.queue = ""  # one row for many queues names none
    return int(outcome in ("cancelled", "requested"))
