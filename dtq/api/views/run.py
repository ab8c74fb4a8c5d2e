"""Run a task by hand: the catalogue of registered tasks, and an audited submission."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from dtq.api import inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.responses import error_responses
from dtq.engine.manual import catalogue, run_by_hand
from dtq.models import PERM_SUBMIT


class TaskCatalogue(DtqView):
    """The registered tasks, with their signatures and queues."""

    permissions = {"GET": PERM_SUBMIT}

    @document(
        operation_id="tasks_catalogue",
        responses={200: responses.Catalogue, **error_responses(401, 403)},
    )
    def get(self, request: Request) -> Response:
        """List the tasks that can be run by hand."""
        return render(responses.Catalogue, {"results": catalogue()})


class TaskRun(DtqView):
    """Run one registered task by hand."""

    permissions = {"POST": PERM_SUBMIT}
    throttled_methods = ("POST",)

    @document(
        operation_id="tasks_run",
        request=inputs.RunRequest,
        responses={
            202: responses.RunResult,
            **error_responses(400, 401, 403, 413, 415, 429, 503),
        },
    )
    def post(self, request: Request) -> Response:
        """Check the arguments against the task's signature, submit it, write an audit row."""
        form = valid(inputs.RunRequest, body(request)).validated_data
        task_id = run_by_hand(
            form["task"],
            actor=self.actor(),
            args=form["args"],
            kwargs=form["kwargs"],
            queue=form.get("queue"),
            priority=form.get("priority"),
            delay=form["delay"],
            reason=form["reason"],
        )
        url = reverse("dtq-api:task-detail", args=[task_id], request=request)
        return render(responses.RunResult, {"id": task_id, "url": url}, 202)
