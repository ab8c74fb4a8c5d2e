"""Show queues, workers and scheduler/reaper liveness (a table, or JSON with --json)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from dtq.engine import read_side
from dtq.engine.connection import describe, mask_url, redis_url
from dtq.engine.errors import ReadBudgetExceeded
from dtq.management.commands._common import queue_name

SHOWN_COUNTERS = (
    "submitted",
    "succeeded",
    "failed",
    "retried",
    "dead_lettered",
    "cancelled",
    "expired",
    "reclaimed",
    "absorbed",
    "stale",
    "start_skipped",
)


class Command(BaseCommand):
    help = "Show queue depths, workers and scheduler/reaper liveness."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            type=queue_name,
            dest="queues",
            help="only this queue (repeatable; default: every known queue)",
        )
        parser.add_argument(
            "--after",
            type=queue_name,
            help="start after this queue name (the next page of a long queue list)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with read_side.read_budget():
                status = collect(options["queues"], options["after"])
        except ReadBudgetExceeded as exc:
            raise CommandError(str(exc)) from None
        except RedisError as exc:
            url = mask_url(redis_url())
            raise CommandError(f"cannot read dtq's state from {url}: {describe(exc)}") from None
        if options["json"]:
            self.stdout.write(json.dumps(status, indent=2))
        else:
            self.stdout.write(render(status))


def collect(queues: list[str] | None = None, after: str | None = None) -> dict[str, Any]:
    """Return everything dtq_status shows, as JSON-ready data (queues: one budgeted page)."""
    workers = read_side.workers()
    processes = {role: read_side.processes(role) for role in read_side.ROLES}
    page = read_side.overview_page(queues, after=after)
    return {
        "queues": page["queues"],
        "queues_total": page["total"],
        "next_queue": page["next_cursor"],
        "workers": workers,
        "processes": processes,
    }


def render(status: dict[str, Any]) -> str:
    """Return the status as readable tables."""
    more = ""
    if status.get("next_queue"):
        shown, total = len(status["queues"]), status["queues_total"]
        more = f"  ({shown} of {total} queues shown; next page: --after {status['next_queue']})\n"
    parts = [
        "Queues",
        _queue_table(status["queues"]) + more,
        "Counters (since the queue was first used)",
        _counter_table(status["queues"]),
        "Workers",
        _worker_table(status["workers"]),
        "Scheduler and reaper",
        _process_table(status["processes"]),
    ]
    return "\n".join(parts) + "\n"


def _queue_table(queues: list[dict[str, Any]]) -> str:
    headers = ["queue", "high", "normal", "low", "pending", "running", "scheduled", "dlq"]
    headers += ["paused", "oldest waiting"]
    rows = [
        [
            q["name"],
            *q["depth"],
            sum(q["pending"]),
            q["running"],
            q["scheduled"],
            q["dlq"],
            "yes" if q["paused"] else "no",
            age(q["oldest_waiting_age"]),
        ]
        for q in queues
    ]
    return table(headers, rows, empty="no queues yet")


def _counter_table(queues: list[dict[str, Any]]) -> str:
    rows = [[q["name"], *(q["counters"][c] for c in SHOWN_COUNTERS)] for q in queues]
    return table(["queue", *SHOWN_COUNTERS], rows, empty="no queues yet")


def _worker_table(workers: list[dict[str, Any]]) -> str:
    headers = ["worker", "queues", "in flight", "stuck", "processed", "heartbeat", "alive"]
    rows = [
        [
            w["id"],
            ",".join(w["queues"]),
            f"{w['in_flight']}/{w['concurrency']}",
            w["stuck"],
            w["processed"],
            age(w["heartbeat_age"]) + " ago",
            "yes" if w["alive"] else "NO",
        ]
        for w in workers
    ]
    return table(headers, rows, empty="no workers")


def _process_table(processes: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for role, procs in processes.items():
        alive = [p for p in procs if p["alive"]]
        if not alive:
            rows.append([role, "-", "-", "NONE ALIVE"])
        rows += [
            [role, p["id"], age(p["heartbeat_age"]) + " ago", "yes" if p["alive"] else "no"]
            for p in procs
        ]
    return table(["role", "process", "heartbeat", "alive"], rows, empty="")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str) -> str:
    """Format rows as left-aligned columns under their headers."""
    if not rows:
        return f"  ({empty})\n"
    cells = [[str(h) for h in headers], *([str(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(("  " + line).rstrip() for line in lines) + "\n"


def age(seconds: float | None) -> str:
    """Format a duration briefly: 0.4s, 12s, 5m, 3h, 2d."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
