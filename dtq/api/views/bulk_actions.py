"""Bulk actions by filter: a dry run that plans a job, its start, and its progress."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import NotFound
from dtq.api.responses import error_responses
from dtq.engine import bulk_jobs
from dtq.models import PERM_CANCEL, PERM_DISCARD, PERM_REPLAY

JOB_ID = re.compile(r"[0-9a-f]{32}")
JOB_ID_PARAMETER = OpenApiParameter(
    "job_id", str, OpenApiParameter.PATH, pattern=f"^{JOB_ID.pattern}$"
)
# action -> the permission of its single-task form
PERMISSIONS = {
    "retry": PERM_REPLAY,
    "cancel": PERM_CANCEL,
    "replay": PERM_REPLAY,
    "discard": PERM_DISCARD,
}


def _job(job_id: str) -> dict[str, Any]:
    job = bulk_jobs.progress(job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None:
        raise NotFound(f"no bulk job {job_id} (never planned, or expired)")
    return job


def _views(action: str) -> tuple[type[DtqView], type[DtqView]]:
    """Return the plan (dry run) and start views of one bulk action."""

    class Plan(DtqView):
        permissions = {"POST": PERMISSIONS[action]}

        @document(
            operation_id=f"bulk_{action}_plan",
            summary=f"Dry run of a bulk {action}",
            request=inputs.BulkPlanRequest,
            responses={201: responses.BulkPlan, **error_responses(400, 401, 403, 413, 415, 503)},
        )
        def post(self, request: Request) -> Response:
            """Count what the action would touch and plan a job for exactly those tasks."""
            data = valid(inputs.BulkPlanRequest, body(request)).validated_data
            plan = bulk_jobs.plan(action, query=data.get("q") or "", task_ids=data.get("task_ids"))
            result = {"job": _job(plan.job_id), "more": plan.more, "skipped": plan.skipped}
            return render(responses.BulkPlan, result, 201)

    class Start(DtqView):
        permissions = {"POST": PERMISSIONS[action]}

        @document(
            operation_id=f"bulk_{action}_start",
            summary=f"Start a planned bulk {action}",
            request=inputs.BulkStartRequest,
            responses={202: responses.BulkJob, **error_responses(400, 401, 403, 413, 415, 503)},
        )
        def post(self, request: Request) -> Response:
            """Run the planned job in the background, in batches, under one audit row."""
            data = valid(inputs.BulkStartRequest, body(request)).validated_data
            bulk_jobs.start(data["job"], actor=self.actor(), reason=data["reason"], action=action)
            return render(responses.BulkJob, _job(data["job"]), 202)

    Plan.__name__, Start.__name__ = f"Bulk{action.title()}Plan", f"Bulk{action.title()}Start"
    Plan.__doc__, Start.__doc__ = f"Dry run of a bulk {action}.", f"Start a bulk {action}."
    return Plan, Start


VIEWS = {action: _views(action) for action in PERMISSIONS}


class BulkJobDetail(DtqView):
    """One bulk job's progress."""

    @document(
        operation_id="bulk_job_retrieve",
        parameters=[JOB_ID_PARAMETER],
        responses={200: responses.BulkJob, **error_responses(401, 403, 404, 503)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        """Show a bulk job: its count, how many are done or skipped, and its outcome."""
        return render(responses.BulkJob, _job(job_id))
