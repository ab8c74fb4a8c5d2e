"""Queue endpoints: overview, detail, pause, resume, limits, purge."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import BadRequest, NotFound
from dtq.api.fields import QUEUE_NAME_MESSAGE
from dtq.api.responses import error_responses
from dtq.conf import dtq_settings
from dtq.engine import ops, read_side
from dtq.engine.keys import QUEUE_NAME, check_queue_name
from dtq.models import PERM_PAUSE, PERM_PURGE, PERM_VIEW

QUEUE_PARAM = OpenApiParameter(
    "name", str, OpenApiParameter.PATH, pattern=QUEUE_NAME.pattern, description="queue name"
)


def queue_name(name: str) -> str:
    """Return name if it is a valid queue name, else raise the 400."""
    try:
        return check_queue_name(name)
    except ValueError:
        details = {"fields": {"name": [QUEUE_NAME_MESSAGE]}}
        raise BadRequest("invalid queue name", code="invalid", details=details) from None


class QueueCollection(DtqView):
    """Every known queue."""

    @document(
        operation_id="queues_list",
        parameters=[inputs.QueueListQuery],
        responses={200: responses.QueueList, **error_responses(400, 401, 403, 503)},
    )
    def get(self, request: Request) -> Response:
        """List queues by name with their depths, state counts, DLQ size and counters.

        A page holds at most `limit` queues and no more than the read budget pays for.
        """
        query = valid(inputs.QueueListQuery, request.query_params)
        cursor = query.validated_data.get("cursor")
        page = read_side.overview_page(after=cursor, limit=query.limit_or_default())
        data = {"results": page["queues"], "next_cursor": page["next_cursor"]}
        return render(responses.QueueList, data | {"total": page["total"]})


class QueueDetailView(DtqView):
    """One queue."""

    @document(
        operation_id="queues_retrieve",
        parameters=[QUEUE_PARAM, inputs.QueueDetailQuery],
        responses={200: responses.QueueDetail, **error_responses(400, 401, 403, 404, 503)},
    )
    def get(self, request: Request, name: str) -> Response:
        """Show a queue: depth per band, running, scheduled, DLQ, paused, oldest age, throughput."""
        queue_name(name)
        minutes = valid(inputs.QueueDetailQuery, request.query_params).validated_data["minutes"]
        if name not in read_side.queue_names():
            raise NotFound(f"no queue {name!r} (no task was ever submitted to it)")
        overview = read_side.queue_overview(name)
        data = {**overview, "throughput": read_side.throughput(name, minutes)}
        return render(responses.QueueDetail, data)


class QueuePause(DtqView):
    """Stop workers reading a queue."""

    permissions = {"POST": PERM_PAUSE}
    paused = True

    @document(
        operation_id="queues_pause",
        parameters=[QUEUE_PARAM],
        request=inputs.ReasonRequest,
        responses={200: responses.PauseResult, **error_responses(400, 401, 403, 413, 415, 503)},
    )
    def post(self, request: Request, name: str) -> Response:
        """Pause a queue: submissions are still accepted, workers read nothing from it."""
        queue_name(name)
        reason = valid(inputs.ReasonRequest, body(request)).validated_data["reason"]
        change = ops.pause_queue if self.paused else ops.resume_queue
        changed = change(name, actor=self.actor(), reason=reason)
        return render(
            responses.PauseResult, {"queue": name, "paused": self.paused, "changed": changed}
        )


class QueueResume(QueuePause):
    """Let workers read a paused queue again."""

    paused = False

    @document(
        operation_id="queues_resume",
        parameters=[QUEUE_PARAM],
        request=inputs.ReasonRequest,
        responses={200: responses.PauseResult, **error_responses(400, 401, 403, 413, 415, 503)},
    )
    def post(self, request: Request, name: str) -> Response:
        """Resume a paused queue."""
        return super().post(request, name)


class QueueLimitsView(DtqView):
    """A queue's own flow-control limits."""

    permissions = {"GET": PERM_VIEW, "PUT": PERM_PAUSE}

    @document(
        operation_id="queues_limits_retrieve",
        parameters=[QUEUE_PARAM],
        responses={200: responses.QueueLimitsResult, **error_responses(400, 401, 403, 503)},
    )
    def get(self, request: Request, name: str) -> Response:
        """Show a queue's max concurrency and rate, the slots in use and the tasks waiting."""
        queue_name(name)
        return render(responses.QueueLimitsResult, {"queue": name, **ops.queue_limits(name)})

    @document(
        operation_id="queues_limits_update",
        parameters=[QUEUE_PARAM],
        request=inputs.QueueLimitsRequest,
        responses={
            200: responses.QueueLimitsResult,
            **error_responses(400, 401, 403, 404, 413, 415, 503),
        },
    )
    def put(self, request: Request, name: str) -> Response:
        """Change a queue's limits at run time (audited); waiters with room start at once."""
        queue_name(name)
        data = valid(inputs.QueueLimitsRequest, body(request)).validated_data
        changes = {k: data[k] for k in ("max_concurrency", "rate") if k in data}
        limits = ops.set_queue_limits(
            name, actor=self.actor(), burst=data.get("burst"), reason=data["reason"], **changes
        )
        return render(responses.QueueLimitsResult, {"queue": name, **limits})


class QueuePurge(DtqView):
    """Cancel every waiting task of a queue."""

    permissions = {"POST": PERM_PURGE}

    @document(
        operation_id="queues_purge",
        parameters=[QUEUE_PARAM],
        request=inputs.PurgeRequest,
        responses={200: responses.PurgeResult, **error_responses(400, 401, 403, 413, 415, 503)},
    )
    def post(self, request: Request, name: str) -> Response:
        """Purge a queue (audited, reason required); dry_run only counts what it would take."""
        queue_name(name)
        form = valid(inputs.PurgeRequest, body(request)).validated_data
        more: dict[str, Any] = {"more": False, "next_cursor": None}
        if form["dry_run"]:
            preview = ops.preview_purge(name)
            counts = {"queued": preview.queued, "scheduled": preview.scheduled}
            running, purged = preview.running, preview.total
        else:
            result = ops.purge_queue(
                name,
                actor=self.actor(),
                reason=form["reason"],
                limit=dtq_settings.BULK_REQUEST_LIMIT,
                cursor=form.get("cursor"),
            )
            counts = {"queued": result.queued, "scheduled": result.scheduled}
            running, purged = result.running, result.purged
            more = {"more": result.more, "next_cursor": result.next_cursor}
        data = {"queue": name, "dry_run": form["dry_run"], **counts, **more}
        return render(responses.PurgeResult, data | {"running": running, "purged": purged})
