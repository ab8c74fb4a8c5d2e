"""Prometheus text exposition of dtq's counters and gauges (served at /metrics).

Counters are the per-queue stats hashes the Lua scripts keep in Redis; they are totals since
the queue's first task, so rates come from PromQL's rate(). Gauges are read at scrape time.
Latency histograms (wait: enqueue to start; run: start to finish) are counted by the claim and
finalize scripts into the same hashes. One scrape reads as many queues as the read budget pays
for, by name; with more queues, dtq_metrics_next_queue names where the next page starts
(scrape again with ?after=<that name>), so no scrape costs Redis more than the budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request

from dtq.api import access
from dtq.api.base import DtqView, document
from dtq.api.errors import BadRequest
from dtq.engine import read_side
from dtq.engine.keys import check_queue_name
from dtq.models import PERM_VIEW

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COUNTERS = {
    "submitted": "Tasks accepted",
    "started": "Attempts started by a worker",
    "succeeded": "Tasks that succeeded",
    "failed": "Tasks that failed for good without a DLQ",
    "retried": "Attempts that failed and were scheduled for a retry",
    "dead_lettered": "Tasks moved to the dead-letter queue",
    "cancelled": "Tasks cancelled (by an operator or a purge)",
    "expired": "Tasks that passed their TTL before running",
    "absorbed": "Duplicate stream entries absorbed instead of executed",
    "reclaimed": "Attempts reclaimed from dead or stalled workers",
    "stale": "Stale completions rejected by fencing",
    "start_skipped": "Attempts dropped unrun: their lease ran out before the handler started",
    "limit_waits": "Times a task was held back by a concurrency or rate limit",
    "limit_woken": "Waiting tasks handed a freed concurrency slot",
}
QUEUE_GAUGES = {
    "queued": "Tasks waiting in the queue",
    "running": "Tasks running now",
    "scheduled": "Tasks waiting for their run time or retry backoff",
    "dlq": "Entries in the dead-letter queue",
}


def _family(name: str, kind: str, text: str, samples: Iterable[tuple[str, Any]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value}" for labels, value in samples]
    return lines


def _queue_lines(queues: list[read_side.QueueOverview]) -> list[str]:
    # Queue names match keys.QUEUE_NAME, so they never need escaping inside label values.
    lines: list[str] = []
    for counter, text in COUNTERS.items():
        samples = [(f'{{queue="{q["name"]}"}}', q["counters"].get(counter, 0)) for q in queues]
        lines += _family(f"dtq_tasks_{counter}_total", "counter", text, samples)
    for gauge, text in QUEUE_GAUGES.items():
        samples = [(f'{{queue="{q["name"]}"}}', q[gauge]) for q in queues]  # type: ignore[literal-required]
        lines += _family(f"dtq_queue_{gauge}", "gauge", text, samples)
    depth = [
        (f'{{queue="{q["name"]}",band="{band}"}}', n)
        for q in queues
        for band, n in enumerate(q["depth"])
    ]
    lines += _family("dtq_queue_depth", "gauge", "Stream entries per priority band", depth)
    ages = [(f'{{queue="{q["name"]}"}}', q["oldest_waiting_age"] or 0) for q in queues]
    text = "Seconds the oldest queued task has waited (0: none waiting)"
    lines += _family("dtq_queue_oldest_waiting_age_seconds", "gauge", text, ages)
    paused = [(f'{{queue="{q["name"]}"}}', int(q["paused"])) for q in queues]
    lines += _family("dtq_queue_paused", "gauge", "1 when the queue is paused", paused)
    return lines + _limit_lines(queues)


def _limit_lines(queues: list[read_side.QueueOverview]) -> list[str]:
    """Flow control: each queue's own limit and every limit family's use."""
    limited = [q for q in queues if q["limits"]["max_concurrency"]]
    samples = [(f'{{queue="{q["name"]}"}}', q["limits"]["max_concurrency"]) for q in limited]
    text = "The queue's own max concurrency (queues with one)"
    lines = _family("dtq_queue_limit_max_concurrency", "gauge", text, samples)
    families = [row for q in queues for row in read_side.limit_families(q)]

    def labels(row: read_side.LimitFamily) -> str:
        return f'{{queue="{row["queue"]}",family="{_escape(row["family"])}"}}'

    text = "Concurrency slots held now, per limit family (queue, or task name)"
    lines += _family(
        "dtq_limit_slots_held", "gauge", text, [(labels(r), r["held"]) for r in families]
    )
    text = "Tasks waiting for a concurrency slot, per limit family"
    lines += _family(
        "dtq_limit_waiting", "gauge", text, [(labels(r), r["waiting"]) for r in families]
    )
    with_limit = [r for r in families if r["limit"]]
    text = "Max concurrency of a limit family (per key when the task has a concurrency_key)"
    return lines + _family(
        "dtq_limit_max_concurrency", "gauge", text, [(labels(r), r["limit"]) for r in with_limit]
    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


HISTOGRAMS = {
    "wait": ("dtq_task_wait_seconds", "Seconds from enqueue (or retry promotion) to start"),
    "run": ("dtq_task_run_seconds", "Seconds from start to recorded outcome, per attempt"),
    "limit_wait": ("dtq_task_limit_wait_seconds", "Seconds a task was held back by a limit"),
}


def _histogram_lines(queues: list[read_side.QueueOverview]) -> list[str]:
    lines: list[str] = []
    for kind, (name, text) in HISTOGRAMS.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
        for q in queues:
            hist, label = q["latency"][kind], q["name"]
            for bound, count in hist["buckets"]:
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'{name}_bucket{{queue="{label}",le="{le}"}} {count}')
            lines.append(f'{name}_sum{{queue="{label}"}} {hist["sum"]}')
            lines.append(f'{name}_count{{queue="{label}"}} {hist["count"]}')
    return lines


def render(after: str | None = None) -> str:
    """Return the exposition text for the queues after `after` (a page), workers, processes."""
    registered, live = read_side.worker_counts()
    processes = [
        (f'{{role="{role}"}}', sum(1 for p in read_side.processes(role) if p["alive"]))
        for role in read_side.ROLES
    ]
    page = read_side.overview_page(after=after)
    queues = page["queues"]
    lines = _queue_lines(queues) + _histogram_lines(queues)
    lines += _family("dtq_workers_live", "gauge", "Workers with a fresh heartbeat", [("", live)])
    lines += _family("dtq_workers_registered", "gauge", "Workers registered", [("", registered)])
    lines += _family("dtq_processes_live", "gauge", "Live scheduler/reaper processes", processes)
    lines += _family("dtq_queues_known", "gauge", "Queues known", [("", page["total"])])
    if page["next_cursor"]:
        text = "Queues after this name are on the next page: scrape ?after=<queue>"
        samples = [(f'{{after="{page["next_cursor"]}"}}', 1)]
        lines += _family("dtq_metrics_next_queue", "gauge", text, samples)
    return "\n".join(lines) + "\n"


class FirstRenderer(BaseContentNegotiation):
    """Ignore Accept: metrics are text, errors JSON, whatever a scraper asks for."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list[Any], format_suffix: Any = None):
        return renderers[0], renderers[0].media_type


class MetricsView(DtqView):
    """Prometheus metrics, for a user with the view permission or the METRICS_TOKEN bearer."""

    permission_classes = [access.MetricsTokenOrPermission]
    permissions = {"GET": PERM_VIEW}
    content_negotiation_class = FirstRenderer

    @document(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        """Return the metrics in Prometheus' text format (?after=<queue>: the next page)."""
        after = request.query_params.get("after") or None
        if after is not None:
            try:
                check_queue_name(after)
            except ValueError as exc:
                raise BadRequest(str(exc), code="invalid") from None
        return HttpResponse(render(after), content_type=CONTENT_TYPE)
