"""Queue actions: pause and resume (POST), limits (a form), purge (a confirmation page)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST

from dtq.engine import ops
from dtq.engine.errors import DtqError, InvalidOperation
from dtq.views.common import (
    MORE_TASKS,
    actor,
    admin_url,
    bulk_limit,
    page_context,
    queue_param,
    reason_param,
    require,
)


def _queue(name: str) -> str:
    queue = queue_param(name)
    if queue is None:
        raise Http404("invalid queue name")
    return queue


def _set_paused(request: HttpRequest, queue: str, paused: bool) -> HttpResponse:
    action = ops.pause_queue if paused else ops.resume_queue
    try:
        changed = action(queue, actor=actor(request), reason=reason_param(request))
    except DtqError as exc:
        messages.error(request, str(exc))
    else:
        word = "paused" if paused else "resumed"
        messages.success(request, f"Queue {queue} {word}." if changed else f"Already {word}.")
    return HttpResponseRedirect(admin_url("changelist"))


@require_POST
@require("pause")
def queue_pause(request: HttpRequest, site: AdminSite, queue: str) -> HttpResponse:
    """Stop workers reading a queue."""
    return _set_paused(request, _queue(queue), True)


@require_POST
@require("pause")
def queue_resume(request: HttpRequest, site: AdminSite, queue: str) -> HttpResponse:
    """Let workers read a paused queue again."""
    return _set_paused(request, _queue(queue), False)


@require("purge")
def queue_purge(request: HttpRequest, site: AdminSite, queue: str) -> HttpResponse:
    """Show what a purge would cancel (GET); purge with a required reason (POST)."""
    queue = _queue(queue)
    error = ""
    if request.method == "POST":
        reason = reason_param(request)
        if reason:
            try:
                result = ops.purge_queue(
                    queue, actor=actor(request), reason=reason, limit=bulk_limit()
                )
            except DtqError as exc:
                messages.error(request, f"Purge failed: {exc}")
            else:
                messages.success(
                    request,
                    f"Purged {queue}: {result.queued} queued and {result.scheduled} scheduled "
                    f"tasks cancelled; {result.running} running tasks left alone.",
                )
                if result.more:  # one request does a bounded part; the page offers the rest
                    messages.warning(request, MORE_TASKS.format(limit=bulk_limit()))
                    return HttpResponseRedirect(admin_url("queue_purge", queue))
            return HttpResponseRedirect(admin_url("changelist"))
        error = "A reason is required."
    context = page_context(
        request,
        site,
        f"Purge queue {queue}?",
        tab="overview",
        queue=queue,
        preview=ops.preview_purge(queue),
        error=error,
    )
    return TemplateResponse(request, "dtq/purge_confirm.html", context)


def _limit_values(request: HttpRequest) -> dict[str, Any]:
    """Read the limits form: an empty field clears its limit."""
    conc = (request.POST.get("max_concurrency") or "").strip()
    rate = (request.POST.get("rate") or "").strip()
    burst = (request.POST.get("burst") or "").strip()
    if conc and not conc.isdigit():
        raise InvalidOperation(f"max_concurrency must be a whole number >= 1, got {conc!r}")
    if burst and not burst.isdigit():
        raise InvalidOperation(f"burst must be a whole number >= 1, got {burst!r}")
    return {
        "max_concurrency": int(conc) if conc else None,
        "rate": rate or None,
        "burst": int(burst) if burst and rate else None,
    }


@require("pause")
def queue_limits(request: HttpRequest, site: AdminSite, queue: str) -> HttpResponse:
    """Show a queue's limits and their use (GET); change them, audited (POST)."""
    queue = _queue(queue)
    error = ""
    if request.method == "POST":
        try:
            values = _limit_values(request)
            ops.set_queue_limits(
                queue, actor=actor(request), reason=reason_param(request), **values
            )
        except DtqError as exc:
            error = str(exc)
        else:
            messages.success(request, f"Limits of {queue} changed.")
            return HttpResponseRedirect(admin_url("changelist"))
    limits = ops.queue_limits(queue)
    context = page_context(
        request,
        site,
        f"Limits of queue {queue}",
        tab="overview",
        queue=queue,
        limits=limits,
        error=error,
        rate_value=_rate_field(queue),
    )
    return TemplateResponse(request, "dtq/queue_limits.html", context)


def _rate_field(queue: str) -> dict[str, str]:
    """Return the form's rate and burst as typed ("20/s", "5") for the current limit."""
    text = ops.queue_limits(queue)["rate"] or ""
    rate, _, burst = text.partition(" (burst ")
    return {"rate": rate, "burst": burst.rstrip(")")}
