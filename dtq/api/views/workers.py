"""One worker: what it runs now, for how long, and its recent tasks."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import responses
from dtq.api.base import DtqView, document, render
from dtq.api.errors import NotFound
from dtq.api.responses import error_responses
from dtq.engine.read_side.worker_page import WORKER_ID, worker_detail

WORKER_ID_PARAMETER = OpenApiParameter(
    "worker_id", str, OpenApiParameter.PATH, pattern=f"^{WORKER_ID.pattern}$"
)


class WorkerDetailView(DtqView):
    """One registered worker."""

    @document(
        operation_id="workers_retrieve",
        parameters=[WORKER_ID_PARAMETER],
        responses={200: responses.WorkerDetail, **error_responses(401, 403, 404, 503)},
    )
    def get(self, request: Request, worker_id: str) -> Response:
        """Show a worker, the tasks it runs now (running_for, progress) and its recent tasks."""
        detail = worker_detail(worker_id)
        if detail is None:
            raise NotFound(f"no worker {worker_id!r} (never registered, or forgotten)")
        detail["running"] = [responses.task_summary(t) for t in detail["running"]]
        detail["history"] = [responses.task_summary(t) for t in detail["history"]]
        return render(responses.WorkerDetail, detail)
