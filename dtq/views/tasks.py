"""The task browser (filter, search, cursor pages), the task page and its cancel button."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from dtq.conf import dtq_settings
from dtq.engine import ids, ops, read_side, registry
from dtq.engine.errors import DtqError
from dtq.engine.firing import schedule_of
from dtq.engine.read_side import query
from dtq.engine.state import TERMINAL_STATES, TaskState
from dtq.views import timeline
from dtq.views.common import (
    actor,
    admin_url,
    can,
    dated,
    moment,
    page_context,
    queue_param,
    reason_param,
    require,
)

PAGE = 50
CANCEL_MESSAGES = {
    "cancelled": "Task cancelled.",
    "requested": "Cancel requested: the running task stops when its handler checks the flag.",
}


def _filters(request: HttpRequest, queues: list[str]) -> dict[str, Any]:
    state = request.GET.get("state") or None
    q = (request.GET.get("q") or "").strip()
    queue = queue_param(request.GET.get("queue"))
    if queue is None and not q and "queue" not in request.GET:
        queue = queues[0] if queues else dtq_settings.DEFAULT_QUEUE
    return {
        "q": q,
        "queue": queue,  # None: every queue
        "state": state if state in TaskState.__members__ else None,
        "task": (request.GET.get("task") or "").strip() or None,
        "cursor": request.GET.get("cursor") or None,
    }


def _page(filters: dict[str, Any]) -> dict[str, Any]:
    """Return one page of tasks; record-level filters read what the read budget pays for."""
    search = query.parse(filters["q"])
    search.narrow(state=filters["state"], name=filters["task"])
    queues = [filters["queue"]] if filters["queue"] else None
    page = query.run(search, PAGE, filters["cursor"], queues=queues)
    return {
        "tasks": [dated(t) | read_side.durations(t) for t in page["tasks"]],
        "next_cursor": page["next_cursor"],
        "scanned": page["scanned"] if search.reads_records else None,
        "partial": page["partial"],
        "queues_read": page["queues_read"],
        "queues_total": page["queues_total"],
    }


@require("view")
def task_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render one page of tasks matching a search, newest first; a task id opens its page."""
    queues = read_side.queue_names()
    filters = _filters(request, queues)
    q = filters["q"]
    if ids.is_valid(q):
        if read_side.get_task(q) is not None:
            return HttpResponseRedirect(admin_url("task", q))
        messages.warning(request, f"No task with id {q!r} (never created, or past retention).")
    page: dict[str, Any] = {"tasks": [], "next_cursor": None, "scanned": None, "partial": False}
    try:
        page = _page(filters)
    except query.QueryError as exc:  # a search that does not parse: say why, show nothing
        messages.error(request, f"Search not understood: {exc}")
    except ValueError as exc:  # a hand-edited cursor: 400 with the reason
        raise BadRequest(str(exc)) from None
    keep = {k: v for k, v in filters.items() if v and k != "cursor"}
    if filters["queue"] is None:
        keep["queue"] = ""  # every queue, also on the next page
    next_url = None
    if page["next_cursor"]:
        next_url = "?" + urlencode({**keep, "cursor": page["next_cursor"]})
    context = page_context(
        request,
        site,
        "Tasks",
        tab="tasks",
        queues=queues,
        states=[s.value for s in TaskState],
        task_names=registry.names(),
        filters=filters,
        first_url="?" + urlencode(keep),
        next_url=next_url,
        **page,
    )
    return TemplateResponse(request, "dtq/tasks.html", context)


def _task_or_404(task_id: str) -> dict[str, Any]:
    record = read_side.get_task(task_id)
    if record is None:
        raise Http404("no such task (never created, or past retention)")
    return record


def pretty(value: Any) -> str:
    """Return value as indented JSON, as it is stored (not as Python would print it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def task_context(record: dict[str, Any]) -> dict[str, Any]:
    """Return what the task page and its live part show about one record."""
    raw = record.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    history = [h for h in record.get("history") or [] if isinstance(h, dict)]
    runs = {r["attempt"]: r["run_seconds"] for r in read_side.durations(record)["attempt_runs"]}
    return {
        "task": dated(record) | read_side.durations(record),
        "args": pretty(payload.get("args", [])),
        "kwargs": pretty(payload.get("kwargs", {})),
        "result": pretty(record.get("result")),
        "history": [
            h
            | {
                "started": moment(h.get("started_at") or h.get("at")),
                "ended": moment(h.get("ended_at")),
                "run_seconds": runs.get(h.get("attempt")) if h.get("ended_at") else None,
            }
            for h in history
        ],
        "timeline": timeline.of(record),
        "finished": record.get("state") in TERMINAL_STATES,
    }


@require("view")
def task_detail(request: HttpRequest, site: AdminSite, task_id: str) -> HttpResponse:
    """Render one task: arguments, result, attempts with tracebacks, timeline, cancel."""
    record = _task_or_404(task_id)
    schedule = schedule_of(str(record.get("idem") or ""))  # a periodic firing links back
    raw = record.get("payload")
    workflow = raw.get("wf") if isinstance(raw, dict) else None  # a member links back
    context = page_context(
        request,
        site,
        f"Task {task_id}",
        tab="tasks",
        schedule=schedule,
        workflow=workflow,
        **task_context(record),
    )
    return TemplateResponse(request, "dtq/task.html", context)


@require("view")
def task_live(request: HttpRequest, site: AdminSite, task_id: str) -> HttpResponse:
    """Render only the refreshable part of the task page (fetched by dtq/live.js)."""
    record = _task_or_404(task_id)
    context = {"can": can(request), **task_context(record)}
    return TemplateResponse(request, "dtq/_task_live.html", context)


@require_POST
@require("cancel")
def task_cancel(request: HttpRequest, site: AdminSite, task_id: str) -> HttpResponse:
    """Cancel a task (a running one is asked to stop) and go back to its page."""
    reason = reason_param(request) or "cancelled from the admin"
    try:
        outcome = ops.cancel(task_id, actor=actor(request), reason=reason)
    except DtqError as exc:
        messages.error(request, f"Not cancelled: {exc}")
    else:
        messages.success(request, CANCEL_MESSAGES.get(outcome, outcome))
    return HttpResponseRedirect(admin_url("task", task_id))
