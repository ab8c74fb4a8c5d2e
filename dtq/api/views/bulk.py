"""Bulk task submission: many tasks in one request, pipelined to Redis."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from dtq.api import access, inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import ApiError, BadRequest, from_engine
from dtq.api.responses import error_responses
from dtq.engine import registry
from dtq.engine.errors import BulkSubmitError, DtqError
from dtq.engine.submit import Accepted, Submission, submit_many
from dtq.models import PERM_SUBMIT


class TaskBulkSubmit(DtqView):
    """Submit many tasks at once."""

    permissions = {"POST": PERM_SUBMIT}

    @document(
        operation_id="tasks_submit_bulk",
        request=inputs.BulkSubmitRequest,
        responses={
            202: OpenApiResponse(
                responses.BulkSubmitResult, description="accepted: every task, in order"
            ),
            **error_responses(400, 401, 403, 413, 415, 429, 503),
        },
        description=(
            "Every item is validated before anything is written: one invalid item refuses "
            "the request (400 or 413, each bad item named in details.items). A queue that "
            "fills up part way refuses the rest with 429: details.accepted lists the tasks "
            "accepted before it, details.items the refused ones. Each item counts against "
            "API_SUBMIT_THROTTLE. Idempotency keys name one submission: use tasks/ for them."
        ),
    )
    def post(self, request: Request) -> Response:
        """Submit up to 500 runs of registered tasks in one request, in order."""
        if "Idempotency-Key" in request.headers:
            message = "an idempotency key names one submission: send it to tasks/"
            details = {"fields": {"Idempotency-Key": [message]}}
            raise BadRequest(message, code="invalid", details=details)
        form = valid(inputs.BulkSubmitRequest, body(request))
        items = form.validated_data["tasks"]
        throttle = access.SubmitThrottle()
        if not throttle.allow_tasks(request, self, len(items)):
            raise Throttled(wait=throttle.wait())
        subs = [_submission(item) for item in items]
        try:
            outcomes = submit_many(subs)
        except BulkSubmitError as exc:  # an item failed validation: nothing was written
            raise _refusal(exc.errors, []) from None
        accepted = [
            _result(request, sub, outcome)
            for sub, outcome in zip(subs, outcomes, strict=True)
            if isinstance(outcome, Accepted)
        ]
        refused: dict[int, DtqError] = {
            i: outcome for i, outcome in enumerate(outcomes) if not isinstance(outcome, Accepted)
        }
        if refused:
            raise _refusal(refused, accepted, total=len(subs))
        return render(responses.BulkSubmitResult, {"results": accepted}, 202)


def _submission(item: dict[str, Any]) -> Submission:
    task = registry.get(item["task"])
    if task is None:  # the serializer checked it; this only narrows the type
        raise BadRequest(f"no task named {item['task']!r} is registered", code="invalid")
    overrides = inputs.submit_overrides(item)
    return task.using(**overrides).submission(tuple(item["args"]), item["kwargs"])


def _result(request: Request, sub: Submission, accepted: Accepted) -> dict[str, Any]:
    return {
        "id": accepted.id,
        "task": sub.name,
        "queue_name": sub.queue,
        "state": accepted.state or None,
        "duplicate": accepted.duplicate,
        "url": reverse("dtq-api:task-detail", args=[accepted.id], request=request),
    }


def _refusal(
    errors: dict[int, DtqError], accepted: list[dict[str, Any]], total: int = 0
) -> ApiError:
    """Return one error for the refused items: their common status, each item named."""
    by_item = {i: from_engine(exc) for i, exc in errors.items()}
    statuses = {e.status_code for e in by_item.values()}
    codes = {str(e.get_codes()) for e in by_item.values()}
    items = [
        {"index": i, "code": str(e.get_codes()), "message": str(e.detail)}
        for i, e in by_item.items()
    ]
    headers: dict[str, str] = {}
    for e in by_item.values():
        headers.update(e.headers)
    if accepted:
        message = f"{len(errors)} of {total} tasks refused, {len(accepted)} accepted"
    else:
        message = f"{len(errors)} invalid item(s): nothing was submitted"
    error = ApiError(
        f"{message}; first: item {items[0]['index']}: {items[0]['message']}",
        code=codes.pop() if len(codes) == 1 else "invalid",
        details={"items": items, "accepted": [responses.SubmitResult(a).data for a in accepted]},
        headers=headers,
    )
    error.status_code = statuses.pop() if len(statuses) == 1 else 400
    return error
