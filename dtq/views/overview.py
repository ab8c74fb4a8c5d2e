"""The dashboard: queues, throughput over the last hour, workers, scheduler and reaper."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from dtq.engine import events, read_side
from dtq.engine.read_side import trends
from dtq.views import charts
from dtq.views.common import can, dated_event, page_context, queue_param, require

CHART_MINUTES = 60
RECENT_EVENTS = 20
QUEUE_PAGE = 25  # queues per dashboard page (18 commands each)


def role_health(role: str) -> dict[str, Any]:
    """Return how many processes of a role are alive and the freshest heartbeat age."""
    procs = read_side.processes(role)
    alive = [p for p in procs if p["alive"]]
    ages = [p["heartbeat_age"] for p in procs]
    return {
        "role": role,
        "alive": len(alive),
        "seen": len(procs),
        "heartbeat_age": min(ages) if ages else None,
        "ok": bool(alive),
    }


def _with_trends(queue: Any) -> dict[str, Any]:
    """Return a queue row with wait and run p50/p95 from its latency histograms."""
    row = dict(queue)
    for kind in ("wait", "run"):
        hist = queue["latency"][kind]
        row[f"{kind}_p50"] = trends.quantile(hist, 0.5)
        row[f"{kind}_p95"] = trends.quantile(hist, 0.95)
    return row


def live_context(after: str | None = None) -> dict[str, Any]:
    """Return what the refreshable part of the dashboard shows (a handful of round trips).

    The workers and the chart's buckets are read first and the buckets only once: the queue
    page takes what the read budget has left (with several shards each costs SHARDS times).
    """
    workers = read_side.workers()
    minutes = read_side.read_minutes(CHART_MINUTES)
    rows = read_side.throughput(read=minutes)
    page = read_side.overview_page(after=after, limit=QUEUE_PAGE)
    queues = [_with_trends(q) for q in page["queues"]]
    per_queue = trends.throughput_per_queue([q["name"] for q in queues], read=minutes)
    for q in queues:
        q["spark"] = charts.sparkline(per_queue[q["name"]])
    return {
        "queues": queues,
        "queues_total": page["total"],
        "queues_after": after or "",
        "next_queues": page["next_cursor"],
        "totals": {
            key: sum(q[key] for q in queues) for key in ("queued", "running", "scheduled", "dlq")
        },
        "chart": charts.throughput_svg(rows),
        "summary": charts.summarize(rows),
        "chart_minutes": CHART_MINUTES,
        "workers": workers,
        "roles": [role_health(role) for role in read_side.ROLES],
    }


def _after(request: HttpRequest) -> str | None:
    return queue_param(request.GET.get("after"))


@require("view")
def overview(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render the dashboard (queues by name, one page of them: ?after=<queue>)."""
    context = page_context(
        request,
        site,
        "Task queue overview",
        tab="overview",
        recent=[dated_event(e) for e in reversed(events.recent(count=RECENT_EVENTS))],
        **live_context(_after(request)),
    )
    return TemplateResponse(request, "dtq/overview.html", context)


@require("view")
def overview_live(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render only the refreshable part of the dashboard (fetched by dtq/live.js)."""
    context = {"can": can(request), **live_context(_after(request))}
    return TemplateResponse(request, "dtq/_overview_live.html", context)
