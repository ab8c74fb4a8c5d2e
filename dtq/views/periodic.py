"""The schedules pages: every schedule (code and database) with next fires and last firings,
and the audited pause, resume and run-now actions (POST)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from dtq import schedules
from dtq.engine import schedule_ops
from dtq.engine.errors import DtqError, ScheduleNotFound
from dtq.models import PERM_SCHEDULES, PeriodicSchedule
from dtq.views.common import actor, page_context, reason_param, require

ACTIONS = {
    "pause": (schedule_ops.pause, "paused", "already paused"),
    "resume": (schedule_ops.resume, "resumed", "not paused"),
}


def list_url() -> str:
    return reverse("admin:dtq_periodicschedule_changelist")


def show_url(name: str) -> str:
    return reverse("admin:dtq_periodicschedule_show") + f"?name={name}"


def _rows(statuses: list[schedule_ops.ScheduleStatus]) -> list[dict[str, Any]]:
    ids = dict(PeriodicSchedule.objects.values_list("name", "pk"))
    return [
        {
            "status": status,
            "schedule": status.schedule,
            "pk": ids.get(status.schedule.name) if status.schedule.source == "database" else None,
            "firings": [_dated(row) for row in status.firings],
        }
        for status in statuses
    ]


def _dated(row: dict[str, Any]) -> dict[str, Any]:
    moment = datetime.fromtimestamp(row["slot"] / 1000, UTC)
    start = datetime.fromtimestamp(row["from"] / 1000, UTC) if row.get("from") else None
    return {**row, "when": moment, "since": start}


def _disabled() -> list[PeriodicSchedule]:
    return list(PeriodicSchedule.objects.filter(enabled=False))


@require("view")
def schedule_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Every schedule with its state, next fire times and last firings."""
    rows = _rows(schedule_ops.statuses(schedules.all_schedules(), history=3, upcoming=3))
    context = page_context(
        request,
        site,
        "Periodic schedules",
        tab="schedules",
        rows=rows,
        disabled=_disabled(),
        can_change=request.user.has_perm(PERM_SCHEDULES),
    )
    return TemplateResponse(request, "dtq/periodic.html", context)


@require("view")
def schedule_show(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """One schedule: definition, next 10 fire times, last 50 firings and their outcomes."""
    try:
        schedule = schedules.get(request.GET.get("name", ""))
    except ScheduleNotFound as exc:
        raise Http404(str(exc)) from None
    (row,) = _rows([schedule_ops.status(schedule, history=50, upcoming=10)])
    context = page_context(
        request,
        site,
        f"Schedule {schedule.name}",
        tab="schedules",
        row=row,
        can_change=request.user.has_perm(PERM_SCHEDULES),
    )
    return TemplateResponse(request, "dtq/periodic_show.html", context)


@require_POST
@require("view")
def schedule_action(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Pause, resume or run a schedule now (audited); back to where the operator was."""
    if not request.user.has_perm(PERM_SCHEDULES):
        raise PermissionDenied(f"needs the {PERM_SCHEDULES} permission")
    name, action = request.POST.get("name", ""), request.POST.get("action", "")
    try:
        schedule = schedules.get(name)
        if action == "run":
            task_id = schedule_ops.run_now(
                schedule, actor=actor(request), reason=reason_param(request)
            )
            messages.success(request, f"Schedule {name} fired now as task {task_id}.")
        elif action in ACTIONS:
            act, done, noop = ACTIONS[action]
            changed = act(schedule, actor=actor(request), reason=reason_param(request))
            messages.success(request, f"Schedule {name} {done if changed else noop}.")
        else:
            messages.error(request, f"Unknown action {action!r}.")
    except DtqError as exc:
        messages.error(request, str(exc))
    back = request.POST.get("next") == "show"
    return HttpResponseRedirect(show_url(name) if back else list_url())
