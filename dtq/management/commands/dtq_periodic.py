"""List, inspect and control periodic schedules (pause, resume, run now, next fire times)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dtq import schedules
from dtq.engine import schedule_ops
from dtq.engine.schedule_ops import ScheduleStatus
from dtq.management.commands._common import positive_int
from dtq.management.commands._ops import actor, add_reason, engine_errors, when


class Command(BaseCommand):
    help = "List, show, pause, resume or run a periodic schedule now; print its next fire times."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="every schedule, its next fire time, last firing")
        listing.add_argument("--json", action="store_true", help="print one JSON document")
        show = sub.add_parser("show", help="one schedule: definition, next fires, last firings")
        show.add_argument("name")
        show.add_argument("--json", action="store_true", help="print one JSON document")
        for action in ("pause", "resume", "run-now"):
            one = sub.add_parser(action, help=f"{action} a schedule (audited)")
            one.add_argument("name")
            add_reason(one)
        upcoming = sub.add_parser("next", help="the next N fire times of a schedule")
        upcoming.add_argument("name")
        upcoming.add_argument("count", nargs="?", type=positive_int, default=5)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        with engine_errors():
            if action == "list":
                rows = schedule_ops.statuses(schedules.all_schedules())
                self._out([as_json(row) for row in rows] if options["json"] else table(rows))
                return
            schedule = schedules.get(options["name"])
            if action == "show":
                row = schedule_ops.status(schedule)
                self._out(as_json(row) if options["json"] else details(row))
            elif action == "next":
                row = schedule_ops.status(schedule, history=0, upcoming=options["count"])
                self._out("\n".join(moment.isoformat() for moment in row.next_fires))
            else:
                self._act(action, schedule, options["reason"])

    def _act(self, action: str, schedule: Any, reason: str) -> None:
        name = schedule.name
        if action == "pause":
            changed = schedule_ops.pause(schedule, actor=actor(), reason=reason)
            self._out(f"schedule {name}: {'paused' if changed else 'already paused'}")
        elif action == "resume":
            changed = schedule_ops.resume(schedule, actor=actor(), reason=reason)
            self._out(f"schedule {name}: {'resumed' if changed else 'was not paused'}")
        else:
            task_id = schedule_ops.run_now(schedule, actor=actor(), reason=reason)
            self._out(f"schedule {name}: fired now as task {task_id}")

    def _out(self, value: Any) -> None:
        self.stdout.write(value if isinstance(value, str) else json.dumps(value, indent=2))


def as_json(row: ScheduleStatus) -> dict[str, Any]:
    """Return a schedule's status as JSON-ready data."""
    s = row.schedule
    return {
        "name": s.name,
        "source": s.source,
        "task": s.task_name,
        "timing": s.timing.describe(),
        "args": list(s.args),
        "kwargs": s.kwargs,
        "queue": s.queue,
        "catch_up": s.catch_up,
        "overlap": s.overlap,
        "paused": row.paused,
        "next_fires": [moment.isoformat() for moment in row.next_fires],
        "firings": row.firings,
    }


def _last(row: ScheduleStatus) -> str:
    if not row.firings:
        return "-"
    last = row.firings[0]
    outcome = last.get("task_state") or last["outcome"]
    return f"{when(last['slot'] / 1000)} {outcome}"


def table(rows: list[ScheduleStatus]) -> str:
    """Return the schedules as a readable table."""
    header = ("name", "source", "timing", "state", "next fire (UTC)", "last firing")
    lines = [
        (
            r.schedule.name,
            r.schedule.source,
            r.schedule.timing.describe(),
            "paused" if r.paused else "active",
            when(r.next_fires[0].timestamp()) if r.next_fires else "-",
            _last(r),
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    )


def details(row: ScheduleStatus) -> str:
    """Return one schedule's definition, next fire times and last firings."""
    s = row.schedule
    lines = [
        f"schedule {s.name} ({s.source}){' PAUSED' if row.paused else ''}",
        f"  task      {s.task_name} args={list(s.args)} kwargs={s.kwargs}",
        f"  timing    {s.timing.describe()}",
        f"  policies  catch_up={s.catch_up} overlap={s.overlap}",
        "  next fires (UTC): " + ", ".join(when(m.timestamp()) for m in row.next_fires),
        "  last firings (newest first):",
    ]
    for firing in row.firings:
        state = firing.get("task_state", "")
        detail = f"task {firing['task']} {state}" if firing.get("task") else firing["reason"]
        lines.append(f"    {when(firing['slot'] / 1000)}  {firing['outcome']:<8}  {detail}")
    return "\n".join(lines)
