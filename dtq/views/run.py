"""Admin forms that start work: run a task by hand, edit a failed task and run it again."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from dtq.engine import read_side
from dtq.engine.declared import declared
from dtq.engine.edit import edit_and_replay, edit_and_retry
from dtq.engine.errors import DtqError
from dtq.engine.manual import catalogue, run_by_hand
from dtq.views.common import actor, admin_url, page_context, reason_param, require

# state -> (engine function, its verb, the verb's past tense) of the edit form
RERUN: dict[str, tuple[Any, str, str]] = {
    "DEAD_LETTERED": (edit_and_replay, "replay", "replayed"),
    "FAILED": (edit_and_retry, "retry", "retried"),
}


class FormError(ValueError):
    """Raised when a form field does not hold what it must; the message names the field."""


def _json(request: HttpRequest, name: str, kind: type, default: Any) -> Any:
    text = (request.POST.get(name) or "").strip()
    if not text:
        return default
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FormError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise FormError(f"{name} must be a JSON {'array' if kind is list else 'object'}")
    return value


def _number(request: HttpRequest, name: str, kind: type) -> Any:
    text = (request.POST.get(name) or "").strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise FormError(f"{name} must be a number, got {text!r}") from None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


@require("submit")
def run_form(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Show the registered tasks with their signatures; on POST, run one (audited)."""
    form = request.POST if request.method == "POST" else request.GET
    if request.method == "POST":
        try:
            task_id = run_by_hand(
                request.POST.get("task") or "",
                actor=actor(request),
                args=_json(request, "args", list, []),
                kwargs=_json(request, "kwargs", dict, {}),
                queue=request.POST.get("queue") or None,
                priority=_number(request, "priority", int),
                delay=_number(request, "delay", float) or 0,
                reason=reason_param(request) or "run from the admin",
            )
        except (FormError, DtqError) as exc:
            messages.error(request, f"Not started: {exc}")
        else:
            messages.success(request, f"Task {task_id} submitted.")
            return HttpResponseRedirect(admin_url("task", task_id))
    context = page_context(
        request,
        site,
        "Run a task",
        tab="run",
        tasks=catalogue(),
        form=form,
        queues=sorted(declared()),
    )
    return TemplateResponse(request, "dtq/run.html", context)


@require("replay")
def task_edit(request: HttpRequest, site: AdminSite, task_id: str) -> HttpResponse:
    """Show a failed task's arguments, queue and priority to edit; on POST, run it again.

    A dead-lettered task is replayed from its DLQ entry, a FAILED one retried from its record.
    """
    record = read_side.get_task(task_id)
    if record is None or record.get("state") not in RERUN:
        raise Http404("no dead-lettered or FAILED task with this id")
    payload = record["payload"] if isinstance(record.get("payload"), dict) else {}
    rerun, verb, done = RERUN[record["state"]]
    if request.method == "POST":
        try:
            status = rerun(
                task_id,
                actor=actor(request),
                args=_json(request, "args", list, []),
                kwargs=_json(request, "kwargs", dict, {}),
                queue=request.POST.get("queue") or record["queue"],
                priority=_or(_number(request, "priority", int), record.get("priority") or 0),
                reason=reason_param(request) or f"edited and {done} from the admin",
            )
        except (FormError, DtqError) as exc:
            messages.error(request, f"Not {done}: {exc}")
        else:
            messages.success(request, f"Edited and {done} ({status}).")
            return HttpResponseRedirect(admin_url("task", task_id))
    initial = {
        "args": request.POST.get("args") or json.dumps(payload.get("args", [])),
        "kwargs": request.POST.get("kwargs") or json.dumps(payload.get("kwargs", {})),
        "queue": request.POST.get("queue") or record["queue"],
        "priority": request.POST.get("priority") or record.get("priority") or 0,
    }
    context = page_context(
        request,
        site,
        f"Edit and {verb} {task_id}",
        tab="dlq" if record["state"] == "DEAD_LETTERED" else "tasks",
        task=record,
        initial=initial,
        verb=verb,
        queues=sorted(declared()),
    )
    return TemplateResponse(request, "dtq/task_edit.html", context)
