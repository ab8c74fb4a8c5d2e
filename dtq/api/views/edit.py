"""Edit and run a failed task again: replay a dead-lettered one, retry a FAILED one."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import inputs, responses
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.responses import error_responses
from dtq.engine.edit import edit_and_replay, edit_and_retry
from dtq.models import PERM_REPLAY

EDITABLE = ("args", "kwargs", "queue", "priority")


class DlqEditReplay(DtqView):
    """Replay one dead-lettered task with corrected arguments, queue or priority."""

    permissions = {"POST": PERM_REPLAY}

    @document(
        operation_id="dlq_edit_replay",
        request=inputs.EditReplayRequest,
        responses={
            200: responses.ActionResult,
            **error_responses(400, 401, 403, 404, 413, 415, 503),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Check the new values against the task's signature and queues, then replay it.

        One audit row ('replay') records the fields before and after.
        """
        form = valid(inputs.EditReplayRequest, body(request)).validated_data
        changes = {k: form[k] for k in EDITABLE if k in form}
        outcome = edit_and_replay(task_id, actor=self.actor(), reason=form["reason"], **changes)
        return render(responses.ActionResult, {"task_id": task_id, "outcome": outcome})


class TaskRetry(DtqView):
    """Retry one FAILED task (it has no DLQ entry), optionally with corrected values."""

    permissions = {"POST": PERM_REPLAY}

    @document(
        operation_id="task_retry",
        request=inputs.EditReplayRequest,
        responses={
            200: responses.ActionResult,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Check any new values against the task's signature and queues, then retry it.

        Attempts restart at 1; a dead-lettered task is refused (409: replay it from the DLQ).
        One audit row ('replay', parameters.state 'FAILED') records the fields before and after.
        """
        form = valid(inputs.EditReplayRequest, body(request)).validated_data
        changes = {k: form[k] for k in EDITABLE if k in form}
        outcome = edit_and_retry(task_id, actor=self.actor(), reason=form["reason"], **changes)
        return render(responses.ActionResult, {"task_id": task_id, "outcome": outcome})
