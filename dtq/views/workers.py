"""The worker pages: every worker, and one worker's running tasks and history."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from dtq.engine import read_side
from dtq.engine.read_side.worker_page import worker_detail
from dtq.views.common import dated, page_context, require


@require("view")
def worker_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render the registered workers, freshest heartbeat first."""
    context = page_context(request, site, "Workers", tab="workers", workers=read_side.workers())
    return TemplateResponse(request, "dtq/workers.html", context)


@require("view")
def worker_page(request: HttpRequest, site: AdminSite, worker_id: str) -> HttpResponse:
    """Render one worker: heartbeat, what it runs now and for how long, its recent tasks."""
    detail = worker_detail(worker_id)
    if detail is None:
        raise Http404("no such worker (never registered, or forgotten)")
    context = page_context(
        request,
        site,
        f"Worker {worker_id}",
        tab="workers",
        worker=detail["worker"],
        running=[dated(t) | read_side.durations(t) for t in detail["running"]],
        history=[dated(t) | read_side.durations(t) for t in detail["history"]],
        partial=detail["partial"],
    )
    return TemplateResponse(request, "dtq/worker.html", context)
