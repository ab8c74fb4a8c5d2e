"""The workflow page: a chain, group or chord drawn as a graph of its members, live."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST

from dtq.engine import ops, workflows
from dtq.engine.errors import DtqError
from dtq.views.common import actor, admin_url, can, page_context, reason_param, require

MAX_DRAWN = 60  # members drawn per column; the table below lists every member
COLUMN, ROW, BOX_W, BOX_H = 190, 34, 160, 24


def _workflow_or_404(workflow_id: str) -> workflows.Workflow:
    try:
        return workflows.read(workflow_id)
    except workflows.WorkflowNotFound:
        raise Http404("no such workflow (never created, or past retention)") from None


def levels(members: list[workflows.Member]) -> list[int]:
    """Return each member's column: one more than its deepest input (inputs come first)."""
    level: list[int] = []
    for member in members:
        level.append(1 + max((level[d] for d in member.deps), default=-1))
    return level


def graph(members: list[workflows.Member]) -> dict[str, Any]:
    """Return the boxes, edges and size of the SVG graph (at most MAX_DRAWN a column)."""
    level = levels(members)
    rows: dict[int, int] = {}
    boxes: dict[int, dict[str, Any]] = {}
    hidden: dict[int, int] = {}
    for member, col in zip(members, level, strict=True):
        row = rows.get(col, 0)
        rows[col] = row + 1
        if row >= MAX_DRAWN:
            hidden[col] = hidden.get(col, 0) + 1
            continue
        x, y = 10 + col * COLUMN, 10 + row * ROW
        short = member.name.rsplit(".", 1)[-1]
        boxes[member.index] = {"member": member, "x": x, "y": y, "label": short[:22]}
    edges = [
        {
            "x1": boxes[d]["x"] + BOX_W,
            "y1": boxes[d]["y"] + BOX_H // 2,
            "x2": box["x"],
            "y2": box["y"] + BOX_H // 2,
        }
        for box in boxes.values()
        for d in box["member"].deps
        if d in boxes
    ]
    more = [
        {"x": 10 + col * COLUMN, "y": 10 + MAX_DRAWN * ROW + 14, "count": n}
        for col, n in hidden.items()
    ]
    height = 20 + (min(max(rows.values(), default=1), MAX_DRAWN) + (1 if hidden else 0)) * ROW
    width = 20 + (max(level, default=0) + 1) * COLUMN
    return {"boxes": list(boxes.values()), "edges": edges, "more": more, "w": width, "h": height}


def workflow_context(found: workflows.Workflow) -> dict[str, Any]:
    """Return what the workflow page and its live part show."""
    percent = round(100 * found.done / found.total) if found.total else 100
    return {
        "workflow": found,
        "graph": graph(found.members),
        "percent": percent,
        "box_w": BOX_W,
        "box_h": BOX_H,
        "finished": found.state in ("SUCCEEDED", "CANCELLED"),
    }


@require("view")
def workflow_page(request: HttpRequest, site: AdminSite, workflow_id: str) -> HttpResponse:
    """Render a workflow: progress, its graph of members with live states, every member."""
    found = _workflow_or_404(workflow_id)
    context = page_context(
        request, site, f"Workflow {workflow_id}", tab="tasks", **workflow_context(found)
    )
    return TemplateResponse(request, "dtq/workflow.html", context)


@require("view")
def workflow_live(request: HttpRequest, site: AdminSite, workflow_id: str) -> HttpResponse:
    """Render only the refreshable part of the workflow page (fetched by dtq/live.js)."""
    found = _workflow_or_404(workflow_id)
    context = {"can": can(request), **workflow_context(found)}
    return TemplateResponse(request, "dtq/_workflow_live.html", context)


@require_POST
@require("cancel")
def workflow_cancel(request: HttpRequest, site: AdminSite, workflow_id: str) -> HttpResponse:
    """Cancel a workflow and go back to its page."""
    reason = reason_param(request) or "cancelled from the admin"
    try:
        before = ops.cancel_workflow(workflow_id, actor=actor(request), reason=reason)
    except DtqError as exc:
        messages.error(request, f"Not cancelled: {exc}")
    else:
        if before in ("RUNNING", "FAILED"):
            messages.success(request, "Workflow cancelled: nothing more starts.")
        else:
            messages.info(request, f"Nothing to cancel: the workflow is {before}.")
    return HttpResponseRedirect(admin_url("workflow", workflow_id))
