"""Task endpoints: submit, list, detail, cancel."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from dtq.api import idempotency, inputs, listing, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import BadRequest, NotFound
from dtq.api.responses import error_responses
from dtq.engine import ops, read_side, registry
from dtq.engine.declared import task_queues
from dtq.engine.errors import IdempotencyConflict, IdempotencyInProgress
from dtq.engine.read_side.query import QueryError
from dtq.engine.submit import submit
from dtq.models import PERM_CANCEL, PERM_SUBMIT, PERM_VIEW
from dtq.options import IDEMPOTENCY_KEY

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="one logical task per key, queue and user: a replay returns the first task",
    pattern=IDEMPOTENCY_KEY.pattern,
)


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(key):
        message = "1-200 characters of letters, digits and _ . : @ / + = -"
        raise BadRequest(
            "invalid Idempotency-Key header",
            code="invalid",
            details={"fields": {"Idempotency-Key": [message]}},
        )
    return key


def _check_routing(task: Any, overrides: dict[str, Any]) -> None:
    """Refuse (400) a queue or priority the task does not accept from API submitters."""
    fields: dict[str, list[str]] = {}
    queue = overrides.get("queue_name")
    allowed = task_queues(task)
    if queue is not None and queue not in allowed:
        fields["queue_name"] = [f"task {task.name!r} accepts only: {', '.join(allowed)}"]
    own = int(getattr(task, "priority", 0) or 0)
    highest = getattr(task, "max_priority", None)
    highest = own if highest is None else int(highest)
    if overrides.get("priority", own) > highest:
        fields["priority"] = [f"task {task.name!r} accepts a priority of at most {highest}"]
    if fields:
        message = "; ".join(m for ms in fields.values() for m in ms)
        raise BadRequest(message, code="invalid", details={"fields": fields})


class TaskCollection(DtqView):
    """Submit a task, or list tasks."""

    permissions = {"GET": PERM_VIEW, "POST": PERM_SUBMIT}
    throttled_methods = ("POST",)

    @document(
        operation_id="tasks_submit",
        request=inputs.SubmitRequest,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            202: OpenApiResponse(responses.SubmitResult, description="accepted: a new task"),
            200: OpenApiResponse(responses.SubmitResult, description="idempotent replay"),
            **error_responses(400, 401, 403, 409, 413, 415, 422, 429, 503),
        },
    )
    def post(self, request: Request) -> Response:
        """Submit one run of a registered task."""
        key = _idempotency_key(request)
        form = valid(inputs.SubmitRequest, body(request))
        data = form.validated_data
        task = registry.get(data["task"])
        if task is None:  # the serializer checked it; this only narrows the type
            raise BadRequest(f"no task named {data['task']!r} is registered", code="invalid")
        stored = idempotency.stored_key(request.user, key) if key else None
        overrides = form.overrides() | ({"idempotency_key": stored} if stored else {})
        _check_routing(task, overrides)
        sub = task.using(**overrides).submission(tuple(data["args"]), data["kwargs"])
        try:
            accepted = submit(sub)
        except (IdempotencyConflict, IdempotencyInProgress) as exc:
            raise idempotency.error(exc, request.user, key or "") from None
        state = accepted.state or None
        if accepted.duplicate:
            record = read_side.get_task(accepted.id)
            state = record["state"] if record else None
        url = reverse("dtq-api:task-detail", args=[accepted.id], request=request)
        result = {
            "id": accepted.id,
            "task": sub.name,
            "queue_name": sub.queue,
            "state": state,
            "duplicate": accepted.duplicate,
            "url": url,
        }
        status = 200 if accepted.duplicate else 202
        return render(responses.SubmitResult, result, status, headers={"Location": url})

    @document(
        operation_id="tasks_list",
        parameters=[inputs.TaskListQuery],
        responses={200: responses.TaskPage, **error_responses(400, 401, 403, 503)},
    )
    def get(self, request: Request) -> Response:
        """List tasks, newest first by the time they entered their current state."""
        query = valid(inputs.TaskListQuery, request.query_params)
        data = query.validated_data
        task_query = listing.TaskQuery(
            queue=data.get("queue"),
            state=data.get("state"),
            name=data.get("task"),
            created_after=data.get("created_after"),
            created_before=data.get("created_before"),
            limit=query.limit_or_default(),
            cursor=data.get("cursor"),
            q=data.get("q") or "",
        )
        try:
            page = listing.list_tasks(task_query)
        except QueryError as exc:
            fields = {"fields": {"q": [str(exc)]}}
            raise BadRequest(str(exc), code="invalid_query", details=fields) from None
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_cursor") from None
        tasks = [responses.task_summary(t) for t in page["tasks"]]
        result = {"results": tasks, "next_cursor": page["next_cursor"]}
        return render(responses.TaskPage, result | {k: page[k] for k in ("partial", "scanned")})


class TaskDetailView(DtqView):
    """One task."""

    @document(
        operation_id="tasks_retrieve",
        responses={200: responses.TaskDetail, **error_responses(401, 403, 404, 503)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        """Show a task: arguments, state, attempt, result, errors and attempt history."""
        record = read_side.get_task(task_id)
        if record is None:
            raise NotFound(f"no task {task_id} (never created, or past retention)")
        return render(responses.TaskDetail, responses.task_detail(record))


class TaskCancel(DtqView):
    """Cancel a task."""

    permissions = {"POST": PERM_CANCEL}

    @document(
        operation_id="tasks_cancel",
        request=inputs.ReasonRequest,
        responses={
            200: OpenApiResponse(
                responses.ActionResult,
                description="outcome 'cancelled' (it was waiting) or 'requested' (running: "
                "its handler is asked to stop)",
            ),
            **error_responses(400, 401, 403, 404, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Cancel a waiting task at once, or ask a running one to stop."""
        form = valid(inputs.ReasonRequest, body(request))
        reason = form.validated_data["reason"]
        outcome = ops.cancel(task_id, actor=self.actor(), reason=reason)
        return render(responses.ActionResult, {"task_id": task_id, "outcome": outcome})
