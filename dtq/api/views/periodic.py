"""Periodic schedule endpoints: list, detail, create/edit/delete (database ones), pause,
resume, run now. Every change is audited; code-defined schedules are read-only here."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dtq import schedules
from dtq.api import inputs
from dtq.api.base import DtqView, body, document, render, valid
from dtq.api.errors import BadRequest, Conflict, NotFound
from dtq.api.responses import error_responses
from dtq.engine import schedule_ops
from dtq.engine.actions import AuditAction
from dtq.engine.audit import audited
from dtq.engine.errors import ScheduleNotFound
from dtq.engine.firing import NAME, Schedule
from dtq.engine.schedule_ops import ScheduleStatus
from dtq.models import PERM_SCHEDULES, PERM_VIEW, PeriodicSchedule

NAME_PARAM = OpenApiParameter(
    "name", str, OpenApiParameter.PATH, pattern=NAME.pattern, description="schedule name"
)


class ScheduleFiring(serializers.Serializer):
    """One firing or skip; a skipped range has `from`."""

    slot = serializers.IntegerField(help_text="the slot, epoch ms")
    outcome = serializers.CharField(help_text="fired, skipped or buffered")
    task = serializers.CharField(required=False, allow_blank=True)
    task_state = serializers.CharField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True)
    at = serializers.IntegerField(required=False, help_text="when it was decided, epoch ms")


class ScheduleOut(serializers.Serializer):
    """A schedule with its state in Redis."""

    name = serializers.CharField()
    source = serializers.CharField(help_text="code or database")
    task = serializers.CharField()
    timing = serializers.CharField()
    cron = serializers.CharField(allow_null=True)
    every_seconds = serializers.FloatField(allow_null=True)
    timezone = serializers.CharField()
    args = serializers.ListField(child=serializers.JSONField())
    kwargs = serializers.DictField(child=serializers.JSONField())
    queue = serializers.CharField(allow_null=True)
    catch_up = serializers.CharField()
    overlap = serializers.CharField()
    paused = serializers.BooleanField()
    next_fires = serializers.ListField(child=serializers.DateTimeField())
    firings = ScheduleFiring(many=True)


class ScheduleList(serializers.Serializer):
    results = ScheduleOut(many=True)


class ScheduleActionResult(serializers.Serializer):
    name = serializers.CharField()
    changed = serializers.BooleanField()
    task_id = serializers.CharField(required=False)


class ScheduleIn(serializers.ModelSerializer):
    """A database schedule as a client writes it; checked against the task."""

    class Meta:
        model = PeriodicSchedule
        fields = [
            "name",
            "task",
            "cron",
            "every_seconds",
            "timezone",
            "args",
            "kwargs",
            "queue",
            "catch_up",
            "catch_up_window_seconds",
            "overlap",
            "enabled",
            "description",
        ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        fields = {f: getattr(self.instance, f) for f in self.Meta.fields} if self.instance else {}
        row = PeriodicSchedule(**{**fields, **attrs})
        try:
            row.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"definition": exc.messages}) from None
        return attrs


def as_data(status: ScheduleStatus) -> dict[str, Any]:
    s = status.schedule
    return {
        "name": s.name,
        "source": s.source,
        "task": s.task_name,
        "timing": s.timing.describe(),
        "cron": s.timing.cron,
        "every_seconds": None if s.timing.every_ms is None else s.timing.every_ms / 1000,
        "timezone": s.timing.timezone,
        "args": list(s.args),
        "kwargs": s.kwargs,
        "queue": s.queue,
        "catch_up": s.catch_up,
        "overlap": s.overlap,
        "paused": status.paused,
        "next_fires": status.next_fires,
        "firings": status.firings,
    }


def find(name: str) -> Schedule:
    """Return the schedule, or raise the 404."""
    try:
        return schedules.get(name)
    except ScheduleNotFound as exc:
        raise NotFound(str(exc), code="schedule_not_found") from None


def database_row(name: str) -> PeriodicSchedule:
    """Return the database row of a schedule; a code schedule is a 409, none a 404."""
    row = PeriodicSchedule.objects.filter(name=name).first()
    if row is not None:
        return row
    if find(name).source == "code":
        raise Conflict(f"schedule {name!r} is defined in code: change it there", code="read_only")
    raise NotFound(f"no schedule named {name!r}", code="schedule_not_found")


class ScheduleCollection(DtqView):
    """Every schedule (code and database); POST adds a database schedule."""

    permissions = {"GET": PERM_VIEW, "POST": PERM_SCHEDULES}

    @document(
        operation_id="schedules_list",
        responses={200: ScheduleList, **error_responses(401, 403, 503)},
    )
    def get(self, request: Request) -> Response:
        """List every schedule with its state, next fire time and last firing."""
        rows = schedule_ops.statuses(schedules.all_schedules())
        return render(ScheduleList, {"results": [as_data(row) for row in rows]})

    @document(
        operation_id="schedules_create",
        request=ScheduleIn,
        responses={201: ScheduleOut, **error_responses(400, 401, 403, 413, 415, 503)},
    )
    def post(self, request: Request) -> Response:
        """Add a database schedule (audited)."""
        form = valid(ScheduleIn, body(request))
        params = {"schedule": form.validated_data["name"], "change": "added"}
        with audited(self.actor(), AuditAction.PERIODIC_EDIT, parameters=params) as report:
            with transaction.atomic():
                row = form.save()
            report.affected = 1
        return render(ScheduleOut, as_data(schedule_ops.status(row.as_schedule())), status=201)


class ScheduleDetail(DtqView):
    """One schedule; PATCH and DELETE change database schedules only."""

    permissions = {"GET": PERM_VIEW, "PATCH": PERM_SCHEDULES, "DELETE": PERM_SCHEDULES}

    @document(
        operation_id="schedules_retrieve",
        parameters=[NAME_PARAM],
        responses={200: ScheduleOut, **error_responses(401, 403, 404, 503)},
    )
    def get(self, request: Request, name: str) -> Response:
        """Show a schedule: definition, next 10 fire times, last 50 firings with task states."""
        return render(ScheduleOut, as_data(schedule_ops.status(find(name), 50, 10)))

    @document(
        operation_id="schedules_partial_update",
        parameters=[NAME_PARAM],
        request=ScheduleIn,
        responses={200: ScheduleOut, **error_responses(400, 401, 403, 404, 409, 413, 415, 503)},
    )
    def patch(self, request: Request, name: str) -> Response:
        """Change a database schedule (audited; the name cannot change)."""
        row = database_row(name)
        data = body(request)
        if isinstance(data, dict) and data.get("name", name) != name:
            raise BadRequest("a schedule's name cannot change: add a new one", code="invalid")
        form = ScheduleIn(row, data=data, partial=True)
        form.is_valid(raise_exception=True)
        params = {"schedule": name, "change": "changed", "fields": sorted(form.validated_data)}
        with audited(self.actor(), AuditAction.PERIODIC_EDIT, parameters=params) as report:
            form.save()
            report.affected = 1
        return render(ScheduleOut, as_data(schedule_ops.status(find(name))))

    @document(
        operation_id="schedules_destroy",
        parameters=[NAME_PARAM],
        responses={204: None, **error_responses(401, 403, 404, 409, 503)},
    )
    def delete(self, request: Request, name: str) -> Response:
        """Delete a database schedule (audited); its firings already queued stay."""
        row = database_row(name)
        params = {"schedule": name, "change": "deleted"}
        with audited(self.actor(), AuditAction.PERIODIC_EDIT, parameters=params) as report:
            row.delete()
            report.affected = 1
        return Response(status=204)


class SchedulePause(DtqView):
    """Pause a schedule: its slots are skipped until resumed."""

    permissions = {"POST": PERM_SCHEDULES}

    @document(
        operation_id="schedules_pause",
        parameters=[NAME_PARAM],
        request=inputs.ReasonRequest,
        responses={200: ScheduleActionResult, **error_responses(400, 401, 403, 404, 413, 415, 503)},
    )
    def post(self, request: Request, name: str) -> Response:
        """Pause a schedule (audited); changed is false if it was paused already."""
        changed = schedule_ops.pause(find(name), actor=self.actor(), reason=reason_of(request))
        return render(ScheduleActionResult, {"name": name, "changed": changed})


class ScheduleResume(DtqView):
    """Resume a paused schedule from its next slot."""

    permissions = {"POST": PERM_SCHEDULES}

    @document(
        operation_id="schedules_resume",
        parameters=[NAME_PARAM],
        request=inputs.ReasonRequest,
        responses={200: ScheduleActionResult, **error_responses(400, 401, 403, 404, 413, 415, 503)},
    )
    def post(self, request: Request, name: str) -> Response:
        """Resume a schedule (audited); the slots of the pause are skipped."""
        changed = schedule_ops.resume(find(name), actor=self.actor(), reason=reason_of(request))
        return render(ScheduleActionResult, {"name": name, "changed": changed})


class ScheduleRun(DtqView):
    """Fire a schedule once now."""

    permissions = {"POST": PERM_SCHEDULES}

    @document(
        operation_id="schedules_run",
        parameters=[NAME_PARAM],
        request=inputs.ReasonRequest,
        responses={
            200: ScheduleActionResult,
            **error_responses(400, 401, 403, 404, 413, 415, 429, 503),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        """Submit one firing now (audited; scheduled_at = now, the regular slots unchanged)."""
        task_id = schedule_ops.run_now(find(name), actor=self.actor(), reason=reason_of(request))
        return render(ScheduleActionResult, {"name": name, "changed": True, "task_id": task_id})


def reason_of(request: Request) -> str:
    """Return the request's optional reason (400 when it is not a string)."""
    return str(valid(inputs.ReasonRequest, body(request)).validated_data["reason"])
