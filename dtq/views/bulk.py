"""Bulk actions from the task list: a dry-run count to confirm, then a job with a progress bar."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from dtq.engine import bulk_jobs
from dtq.engine.errors import DtqError
from dtq.views.common import PERMS, actor, admin_url, page_context, reason_param, require

JOB_ID = re.compile(r"[0-9a-f]{32}")
# action -> (label, the short name of the permission of its single-task form)
ACTIONS = {
    "retry": ("Retry", "replay"),
    "cancel": ("Cancel", "cancel"),
    "replay": ("Replay", "replay"),
    "discard": ("Discard", "discard"),
}
FILTERS = ("q", "queue", "state", "task")


def _check(request: HttpRequest, action: str) -> None:
    if action not in ACTIONS:
        raise Http404("no such bulk action")
    perm = PERMS[ACTIONS[action][1]]
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"needs the {perm} permission")


def _job(job_id: str) -> dict[str, Any]:
    job = bulk_jobs.progress(job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None:
        raise Http404("no such bulk job (never planned, or expired)")
    return job


def _back(filters: dict[str, str]) -> HttpResponse:
    return HttpResponseRedirect(admin_url("tasks") + "?" + urlencode(filters))


@require_POST
@require("view")
def bulk_plan(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Count what a bulk action would touch (a dry run) and ask to confirm it."""
    action = request.POST.get("action") or ""
    _check(request, action)
    filters = {k: (request.POST.get(k) or "").strip() for k in FILTERS}
    ticked = request.POST.getlist("task_id")
    matching = request.POST.get("scope") == "matching"
    if not matching and not ticked:
        messages.warning(request, "Tick tasks first, or choose every task matching the search.")
        return _back(filters)
    try:
        if matching:
            narrow = {k: filters[k] for k in ("queue", "state", "task")}
            plan = bulk_jobs.plan(action, query=filters["q"], narrow=narrow)
        else:
            plan = bulk_jobs.plan(action, task_ids=ticked)
    except DtqError as exc:
        messages.error(request, str(exc))
        return _back(filters)
    label = ACTIONS[action][0]
    context = page_context(
        request,
        site,
        f"{label} tasks?",
        tab="tasks",
        plan=plan,
        label=label,
        job=_job(plan.job_id),
        filters=filters,
        matching=matching,
    )
    return TemplateResponse(request, "dtq/bulk_confirm.html", context)


@require_POST
@require("view")
def bulk_start(request: HttpRequest, site: AdminSite, job_id: str) -> HttpResponse:
    """Start a planned bulk job, then show its progress."""
    job = _job(job_id)
    _check(request, job["action"])
    try:
        bulk_jobs.start(job_id, actor=actor(request), reason=reason_param(request))
    except DtqError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(admin_url("bulk_job", job_id))


@require("view")
def bulk_job(request: HttpRequest, site: AdminSite, job_id: str) -> HttpResponse:
    """Show a bulk job's progress bar (kept current by live.js polling bulk_job_json)."""
    job = _job(job_id)
    label = ACTIONS[job["action"]][0]
    context = page_context(request, site, f"Bulk {label.lower()}", tab="tasks", job=job)
    return TemplateResponse(request, "dtq/bulk_job.html", context)


@require("view")
def bulk_job_json(request: HttpRequest, site: AdminSite, job_id: str) -> HttpResponse:
    """Return a bulk job's progress as JSON, for the progress bar."""
    return JsonResponse(_job(job_id))
