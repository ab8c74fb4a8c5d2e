"""Periodic schedules as operators see them (status, next fire times) and their actions.

Pause, resume and run-now write one audit row each, like every other operator action. The
management command, the admin and the REST API call these and send no Redis command.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dtq.engine import codec, firing, gateway, shards
from dtq.engine.actions import AuditAction
from dtq.engine.audit import Actor, audited
from dtq.engine.connection import get_client
from dtq.engine.firing import Schedule
from dtq.engine.keys import Keys
from dtq.engine.submit import submit


@dataclass(frozen=True, slots=True)
class ScheduleStatus:
    """A schedule with its state in Redis: paused, next fire times, last firings."""

    schedule: Schedule
    paused: bool
    decided_until: datetime | None  # the last slot fired or skipped
    next_fires: list[datetime]
    firings: list[dict[str, Any]]  # newest first; fired ones carry the task's state


def _keys() -> Keys:
    """Return the keys of HOME: jobs and schedules are process-wide, not sharded."""
    return shards.keys(shards.HOME)


def _when(ms: int | str | None) -> datetime | None:
    return None if ms in (None, "") else datetime.fromtimestamp(int(ms) / 1000, UTC)


def statuses(
    schedules: list[Schedule], history: int = 1, upcoming: int = 1
) -> list[ScheduleStatus]:
    """Return the status of each schedule: a bounded number of commands per schedule."""
    client, keys = get_client(), _keys()
    now = firing.redis_ms(client)
    pipe = client.pipeline(transaction=False)
    for schedule in schedules:
        pipe.hgetall(keys.periodic(schedule.name))
        pipe.lrange(keys.periodic_log(schedule.name), 0, history - 1)
    replies = pipe.execute()
    out = []
    for i, schedule in enumerate(schedules):
        state = firing.text(replies[2 * i])
        rows = [codec.loads(row) for row in replies[2 * i + 1]]
        cursor = int(state.get("cursor") or now)
        start = max(cursor, now)
        next_fires = [_when(s) for s in schedule.timing.slots(start, 2**62, upcoming)]
        out.append(
            ScheduleStatus(
                schedule=schedule,
                paused=state.get("paused") == "1",
                decided_until=_when(state.get("cursor")),
                next_fires=[moment for moment in next_fires if moment is not None],
                firings=rows,
            )
        )
    _add_task_states(client, [row for status in out for row in status.firings])
    return out


def _add_task_states(client: Any, rows: list[dict[str, Any]]) -> None:
    fired = [row for row in rows if row.get("task")]
    states = firing.task_states(client, [row["task"] for row in fired])
    for row, state in zip(fired, states, strict=True):
        row["task_state"] = state or "GONE"


def status(schedule: Schedule, history: int = 20, upcoming: int = 5) -> ScheduleStatus:
    """Return one schedule's status with more history and upcoming fire times."""
    return statuses([schedule], history, upcoming)[0]


def pause(schedule: Schedule, *, actor: Actor, reason: str = "") -> bool:
    """Stop firing a schedule (its slots are skipped until resumed); False if already paused."""
    with audited(
        actor, AuditAction.PERIODIC_PAUSE, reason=reason, parameters=_params(schedule)
    ) as report:
        changed = get_client().hset(_keys().periodic(schedule.name), "paused", "1")
        # HSET answers how many fields it added: 0 when the flag was already there
        report.affected = int(changed)
        if not changed:
            report.detail = "schedule was already paused"
        return bool(changed)


def resume(schedule: Schedule, *, actor: Actor, reason: str = "") -> bool:
    """Fire a paused schedule again from now on; False if it was not paused."""
    with audited(
        actor, AuditAction.PERIODIC_RESUME, reason=reason, parameters=_params(schedule)
    ) as report:
        keys = _keys()
        changed = gateway.periodic_resume(
            get_client(), keys, schedule.name, firing.LOG_LENGTH, reason
        )
        report.affected = int(changed)
        if not changed:
            report.detail = "schedule was not paused"
        return bool(changed)


def run_now(schedule: Schedule, *, actor: Actor, reason: str = "") -> str:
    """Submit one firing at once (scheduled_at = now, slots unchanged); return its task id."""
    with audited(
        actor, AuditAction.PERIODIC_RUN, reason=reason, parameters=_params(schedule)
    ) as report:
        client, keys = get_client(), _keys()
        now = firing.redis_ms(client)
        sub = schedule.submission(now, key=f"{firing.idempotency_key(schedule.name, now)}:now")
        accepted = submit(sub)
        entry = {
            "slot": now,
            "outcome": "fired",
            "task": accepted.id,
            "reason": "run now",
            "at": now,
        }
        pipe = client.pipeline(transaction=True)
        pipe.lpush(keys.periodic_log(schedule.name), codec.dumps(entry))
        pipe.ltrim(keys.periodic_log(schedule.name), 0, firing.LOG_LENGTH - 1)
        pipe.hset(keys.periodic(schedule.name), "last_task", accepted.id)  # overlap sees it
        pipe.execute()
        report.task_id, report.queue, report.affected = accepted.id, sub.queue, 1
        return accepted.id


def _params(schedule: Schedule) -> dict[str, Any]:
    return {"schedule": schedule.name, "source": schedule.source}
