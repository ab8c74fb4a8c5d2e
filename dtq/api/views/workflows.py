"""Workflow endpoints: a chain, group or chord with its members; cancel it."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import NotFound
from dtq.api.responses import error_responses
from dtq.engine import ops, workflows
from dtq.models import PERM_CANCEL


class WorkflowDetailView(DtqView):
    """One workflow."""

    @document(
        operation_id="workflows_retrieve",
        responses={200: responses.WorkflowDetail, **error_responses(401, 403, 404, 503)},
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        """Show a workflow: its state, progress, result and every member with its state."""
        try:
            found = workflows.read(workflow_id)
        except workflows.WorkflowNotFound as exc:
            raise NotFound(str(exc)) from None
        return render(responses.WorkflowDetail, responses.workflow_detail(found))


class WorkflowCancel(DtqView):
    """Cancel a workflow."""

    permissions = {"POST": PERM_CANCEL}

    @document(
        operation_id="workflows_cancel",
        request=inputs.ReasonRequest,
        responses={
            200: OpenApiResponse(
                responses.WorkflowActionResult,
                description="outcome: the state it had (RUNNING or FAILED: cancelled now; "
                "SUCCEEDED or CANCELLED: nothing to do)",
            ),
            **error_responses(400, 401, 403, 404, 413, 415, 503),
        },
    )
    def post(self, request: Request, workflow_id: str) -> Response:
        """Cancel a workflow: nothing more starts, waiting and running members are cancelled."""
        form = valid(inputs.ReasonRequest, body(request))
        reason = form.validated_data["reason"]
        try:
            outcome = ops.cancel_workflow(workflow_id, actor=self.actor(), reason=reason)
        except workflows.WorkflowNotFound as exc:
            raise NotFound(str(exc)) from None
        result = {"workflow_id": workflow_id, "outcome": outcome}
        return render(responses.WorkflowActionResult, result)
