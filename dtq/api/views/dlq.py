"""Dead-letter queue endpoints: list, show, replay, discard, bulk replay, purge."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import inputs, listing, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import BadRequest, NotFound
from dtq.api.responses import error_responses
from dtq.conf import dtq_settings
from dtq.engine import ops, read_side
from dtq.models import PERM_DISCARD, PERM_PURGE, PERM_REPLAY


class DlqCollection(DtqView):
    """Every DLQ entry, newest first."""

    @document(
        operation_id="dlq_list",
        parameters=[inputs.DlqListQuery],
        responses={200: responses.DlqPage, **error_responses(400, 401, 403, 503)},
    )
    def get(self, request: Request) -> Response:
        """List dead-lettered tasks of one queue (?queue=) or of every queue."""
        query = valid(inputs.DlqListQuery, request.query_params)
        data = query.validated_data
        try:
            page = listing.list_dlq(data.get("queue"), query.limit_or_default(), data.get("cursor"))
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_cursor") from None
        result = {"results": page["entries"], "next_cursor": page["next_cursor"]}
        return render(
            responses.DlqPage, result | {"total": page["total"], "partial": page["partial"]}
        )


class DlqDetailView(DtqView):
    """One task's DLQ entry."""

    @document(
        operation_id="dlq_retrieve",
        parameters=[inputs.DlqEntryQuery],
        responses={200: responses.DlqDetail, **error_responses(400, 401, 403, 404, 503)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        """Show a dead-lettered task: its DLQ entry and its record (null once expired)."""
        queue = valid(inputs.DlqEntryQuery, request.query_params).validated_data.get("queue")
        detail = read_side.dlq_detail(task_id, queue)
        if detail is None:
            raise NotFound(f"task {task_id} is not in a dead-letter queue", code="not_in_dlq")
        record = detail["record"]
        task = responses.task_detail(record) if record else None
        return render(responses.DlqDetail, {"entry": detail["entry"], "task": task})


class DlqReplay(DtqView):
    """Replay one DLQ entry."""

    permissions = {"POST": PERM_REPLAY}

    @document(
        operation_id="dlq_replay",
        request=inputs.ReplayRequest,
        responses={
            200: responses.ActionResult,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Put a dead-lettered task back on its queue (or to_queue), attempts from 1."""
        form = valid(inputs.ReplayRequest, body(request)).validated_data
        outcome = ops.replay(
            task_id, actor=self.actor(), to_queue=form.get("to_queue"), reason=form["reason"]
        )
        return render(responses.ActionResult, {"task_id": task_id, "outcome": outcome})


class DlqDiscard(DtqView):
    """Discard one DLQ entry."""

    permissions = {"POST": PERM_DISCARD}

    @document(
        operation_id="dlq_discard",
        request=inputs.ReasonRequest,
        responses={
            200: responses.ActionResult,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Remove a task's DLQ entry for good (its record stays until retention)."""
        reason = valid(inputs.ReasonRequest, body(request)).validated_data["reason"]
        ops.discard(task_id, actor=self.actor(), reason=reason)
        return render(responses.ActionResult, {"task_id": task_id, "outcome": "discarded"})


class DlqBulkReplay(DtqView):
    """Replay every entry of one queue's DLQ that matches a filter."""

    permissions = {"POST": PERM_REPLAY}

    @document(
        operation_id="dlq_replay_bulk",
        request=inputs.DlqFilterRequest,
        responses={200: responses.BulkResult, **error_responses(400, 401, 403, 413, 415, 503)},
    )
    def post(self, request: Request) -> Response:
        """Replay the matching entries (all of the queue's DLQ without filters)."""
        form = valid(inputs.DlqFilterRequest, body(request)).validated_data
        since, until = form.get("since"), form.get("until")
        flt = ops.DlqFilter(
            name=form.get("task"),
            error=form.get("error"),
            since=since.timestamp() if since else None,
            until=until.timestamp() if until else None,
            limit=form.get("limit") or dtq_settings.BULK_REQUEST_LIMIT,
        )
        result = ops.replay_many(
            form["queue"],
            actor=self.actor(),
            flt=flt,
            to_queue=form.get("to_queue"),
            reason=form["reason"],
            after=form.get("cursor"),
        )
        data = {"queue": form["queue"], "done": result.done, "statuses": result.statuses}
        more = {"more": result.more, "next_cursor": result.next_cursor}
        return render(responses.BulkResult, data | {"task_ids": result.task_ids} | more)


class DlqPurge(DtqView):
    """Empty one queue's DLQ."""

    permissions = {"POST": PERM_PURGE}

    @document(
        operation_id="dlq_purge",
        request=inputs.DlqPurgeRequest,
        responses={
            200: responses.DlqPurgeResult,
            **error_responses(400, 401, 403, 413, 415, 503),
        },
    )
    def post(self, request: Request) -> Response:
        """Discard a queue's DLQ entries (audited, reason required), BULK_REQUEST_LIMIT at most.

        `more` says entries may remain: purge again. dry_run only counts.
        """
        form = valid(inputs.DlqPurgeRequest, body(request)).validated_data
        queue, more = form["queue"], False
        if form["dry_run"]:
            entries = read_side.dlq_entries(queue, 1)["total"]
        else:
            limit = dtq_settings.BULK_REQUEST_LIMIT
            result = ops.purge_dlq(queue, actor=self.actor(), reason=form["reason"], limit=limit)
            entries, more = result.done, result.more
        data = {"queue": queue, "dry_run": form["dry_run"], "entries": entries, "more": more}
        return render(responses.DlqPurgeResult, data)
