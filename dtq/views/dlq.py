"""The dead-letter queue: filter, select, replay or discard through a confirmation page."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from dtq.engine import audit_db, ids, ops, read_side
from dtq.engine.errors import DtqError
from dtq.engine.read_side import DlqEntry
from dtq.views.common import (
    MORE_ENTRIES,
    PERMS,
    actor,
    admin_url,
    bulk_limit,
    moment,
    page_context,
    queue_param,
    reason_param,
    require,
)

PAGE = 50
SCAN_PAGE = 200
SCAN_LIMIT = 2000  # entries read per page view at most when a filter is set
MAX_SELECTED = 200
ACTIONS = {"replay": "Replay", "discard": "Discard"}


def _filter(data: Any) -> ops.DlqFilter:
    name = (data.get("name") or "").strip() or None
    error = (data.get("error") or "").strip() or None
    return ops.DlqFilter(name=name, error=error)


def _default_queue(queues: list[str]) -> str | None:
    return queues[0] if queues else None


def _page(queue: str, flt: ops.DlqFilter, before: str | None) -> dict[str, Any]:
    """Return one page of entries, newest first; a filter reads a bounded number of entries."""
    if flt == ops.DlqFilter():
        page = read_side.dlq_entries(queue, limit=PAGE, before=before)
        return {
            "entries": page["entries"],
            "next_cursor": page["next_cursor"],
            "total": page["total"],
        }
    found: list[DlqEntry] = []
    scanned, total = 0, 0
    while scanned < SCAN_LIMIT:
        page = read_side.dlq_entries(queue, limit=SCAN_PAGE, before=before)
        scanned += SCAN_PAGE
        total = page["total"]
        found += [e for e in page["entries"] if flt.matches(e)]
        before = page["next_cursor"]
        if before is None or len(found) >= PAGE:
            break
    return {"entries": found, "next_cursor": before, "total": total}


@require("view")
def dlq_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Render one page of a queue's DLQ with filters, checkboxes and bulk actions."""
    queues = read_side.queue_names()
    queue = queue_param(request.GET.get("queue")) or _default_queue(queues)
    flt = _filter(request.GET)
    page: dict[str, Any] = {"entries": [], "next_cursor": None, "total": 0}
    if queue is not None:
        try:
            page = _page(queue, flt, request.GET.get("before") or None)
        except ValueError as exc:  # a hand-edited cursor: 400 with the reason
            raise BadRequest(str(exc)) from None
    page["entries"] = [e | {"at": moment(e["dead_lettered_at"])} for e in page["entries"]]
    keep = {"queue": queue or "", "name": flt.name or "", "error": flt.error or ""}
    keep = {k: v for k, v in keep.items() if v}
    next_url = None
    if page["next_cursor"]:
        next_url = "?" + urlencode({**keep, "before": page["next_cursor"]})
    context = page_context(
        request,
        site,
        "Dead-letter queue",
        tab="dlq",
        queues=queues,
        queue=queue,
        flt=flt,
        filtered=flt != ops.DlqFilter(),
        first_url="?" + urlencode(keep),
        next_url=next_url,
        actions=ACTIONS,
        **page,
    )
    return TemplateResponse(request, "dtq/dlq.html", context)


def _check_action(request: HttpRequest, action: str) -> None:
    if action not in ACTIONS:
        raise Http404("unknown action")
    if not request.user.has_perm(PERMS[action]):
        raise PermissionDenied(f"needs the {PERMS[action]} permission")


def _selection(request: HttpRequest, queue: str) -> dict[str, Any]:
    """Return what the operator selected: some task ids, or every entry matching the filter."""
    scope = "matching" if request.POST.get("scope") == "matching" else "selected"
    chosen = [t for t in request.POST.getlist("task")[:MAX_SELECTED] if ids.is_valid(t)]
    typed = (request.POST.get("to_queue") or "").strip()
    to_queue = queue_param(typed) if typed else queue
    return {"scope": scope, "tasks": chosen, "to_queue": to_queue, "flt": _filter(request.POST)}


def _back(queue: str, flt: ops.DlqFilter) -> HttpResponseRedirect:
    keep = {"queue": queue, "name": flt.name or "", "error": flt.error or ""}
    return HttpResponseRedirect(
        admin_url("dlq") + "?" + urlencode({k: v for k, v in keep.items() if v})
    )


@require_POST
@require("view")
def dlq_action(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Show the confirmation page for a bulk replay/discard, then (confirmed) run it."""
    action = request.POST.get("action") or ""
    _check_action(request, action)
    queue = queue_param(request.POST.get("queue"))
    if queue is None:
        raise Http404("no queue")
    sel = _selection(request, queue)
    if sel["scope"] == "selected" and not sel["tasks"]:
        messages.warning(request, "Select entries first, or choose every matching entry.")
        return _back(queue, sel["flt"])
    if sel["to_queue"] is None:
        messages.error(request, "Replay to queue: use 1-64 letters, digits, '_', '.' or '-'.")
        return _back(queue, sel["flt"])
    if request.POST.get("confirm") != "yes":
        context = page_context(
            request,
            site,
            f"{ACTIONS[action]} dead-lettered tasks?",
            tab="dlq",
            action=action,
            action_label=ACTIONS[action],
            queue=queue,
            total=read_side.dlq_entries(queue, limit=1)["total"],
            **sel,
        )
        return TemplateResponse(request, "dtq/dlq_confirm.html", context)
    messages.info(request, _run(request, action, queue, sel))
    return _back(queue, sel["flt"])


def _run(request: HttpRequest, action: str, queue: str, sel: dict[str, Any]) -> str:
    who, reason = actor(request), reason_param(request)
    to_queue = sel["to_queue"] if sel["to_queue"] != queue else None
    if sel["scope"] == "matching":
        flt = dataclasses.replace(sel["flt"], limit=bulk_limit())  # one bounded part a request
        try:
            if action == "replay":
                result = ops.replay_many(
                    queue, actor=who, flt=flt, to_queue=to_queue, reason=reason
                )
            else:
                result = ops.discard_many(queue, actor=who, flt=flt, reason=reason)
        except DtqError as exc:
            return f"{ACTIONS[action]} failed: {exc}"
        more = " " + MORE_ENTRIES.format(limit=bulk_limit()) if result.more else ""
        return f"{ACTIONS[action]}: {result.done} entries of {queue}'s DLQ.{more}"
    done, refused = 0, []
    with audit_db.one_connection():  # one audit row per id, all on one connection
        for task_id in sel["tasks"]:
            try:
                if action == "replay":
                    ops.replay(task_id, actor=who, queue=queue, to_queue=to_queue, reason=reason)
                else:
                    ops.discard(task_id, actor=who, queue=queue, reason=reason)
                done += 1
            except DtqError as exc:
                refused.append(str(exc))
    note = f" {len(refused)} refused: {'; '.join(refused[:3])}" if refused else ""
    return f"{ACTIONS[action]}: {done} of {len(sel['tasks'])} selected entries.{note}"


@require("purge")
def dlq_purge(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Confirm (GET) and run (POST, with a reason) the purge of one queue's whole DLQ."""
    queue = queue_param(request.GET.get("queue") or request.POST.get("queue"))
    if queue is None:
        raise Http404("no queue")
    error = ""
    if request.method == "POST":
        reason = reason_param(request)
        if reason:
            try:
                result = ops.purge_dlq(
                    queue, actor=actor(request), reason=reason, limit=bulk_limit()
                )
            except DtqError as exc:
                messages.error(request, f"DLQ purge failed: {exc}")
            else:
                messages.success(request, f"Purged {result.done} entries from {queue}'s DLQ.")
                if result.more:
                    messages.warning(request, MORE_ENTRIES.format(limit=bulk_limit()))
            return HttpResponseRedirect(admin_url("dlq") + "?" + urlencode({"queue": queue}))
        error = "A reason is required."
    context = page_context(
        request,
        site,
        f"Purge the dead-letter queue of {queue}?",
        tab="dlq",
        queue=queue,
        total=read_side.dlq_entries(queue, limit=1)["total"],
        error=error,
    )
    return TemplateResponse(request, "dtq/dlq_purge.html", context)
