"""Workers, the audit log, health and readiness."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from redis.exceptions import RedisError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from dtq.api import access, inputs, responses
from dtq.api.base import DtqView, document, render, valid
from dtq.api.errors import BadRequest, Unavailable
from dtq.api.responses import error_responses
from dtq.engine import audit_db, cursors, read_side
from dtq.models import PERM_VIEW, AuditEntry

PERM_VIEW_AUDIT = "dtq.view_auditentry"


class WorkerCollection(DtqView):
    """Every registered worker."""

    @document(
        operation_id="workers_list",
        responses={200: responses.WorkerList, **error_responses(401, 403, 503)},
    )
    def get(self, request: Request) -> Response:
        """List workers: host, pid, queues, concurrency, in flight, processed, heartbeat age."""
        return render(responses.WorkerList, {"results": read_side.workers()})


class AuditCollection(DtqView):
    """The audit log of operator actions, newest first."""

    permissions = {"GET": PERM_VIEW_AUDIT}

    @document(
        operation_id="audit_list",
        parameters=[inputs.AuditQuery],
        responses={200: responses.AuditPage, **error_responses(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        """List audit rows (who did what, to which target, with which outcome)."""
        query = valid(inputs.AuditQuery, request.query_params)
        data = query.validated_data
        rows = AuditEntry.objects.using(audit_db.read_alias()).order_by("-id")
        for name, lookup in (("action", "action"), ("queue", "queue"), ("task_id", "task_id")):
            if name in data:
                rows = rows.filter(**{lookup: data[name]})
        if "actor" in data:
            rows = rows.filter(actor_name=data["actor"])
        if "cursor" in data:
            try:
                rows = rows.filter(id__lt=cursors.audit_cursor(data["cursor"]))
            except ValueError as exc:
                raise BadRequest(str(exc), code="invalid_cursor") from None
        limit = query.limit_or_default()
        page = list(rows[: limit + 1])
        cursor = str(page[limit - 1].pk) if len(page) > limit else None
        return render(responses.AuditPage, {"results": page[:limit], "next_cursor": cursor})


class HealthView(DtqView):
    """Liveness of the web process itself."""

    permission_classes = [AllowAny]

    def get_authenticators(self) -> list[Any]:
        return []  # no session or database work for a liveness probe

    def get_throttles(self) -> list[Any]:
        return []  # a probe is never throttled

    @document(operation_id="health", auth=[], responses={200: responses.Health})
    def get(self, request: Request) -> Response:
        """Answer 200 while the process serves requests (no authentication, no Redis)."""
        return render(responses.Health, {"status": "ok"})


def readiness() -> dict[str, dict[str, Any]]:
    """Return one check per dependency: Redis reachable, a live scheduler and reaper."""
    try:
        found = {role: read_side.processes(role) for role in read_side.ROLES}
    except RedisError as exc:
        down = {"ok": False, "detail": f"not reachable: {type(exc).__name__}"}
        unknown = {"ok": False, "detail": "unknown: Redis is not reachable"}
        return {"redis": down} | {role: unknown for role in read_side.ROLES}
    checks = {"redis": {"ok": True, "detail": ""}}
    for role, procs in found.items():
        alive = sum(1 for p in procs if p["alive"])
        checks[role] = {"ok": alive > 0, "detail": f"{alive} live {role} process(es)"}
    return checks


class ReadyView(DtqView):
    """Readiness: Redis, a live scheduler and a live reaper."""

    permission_classes = [access.MetricsTokenOrPermission]
    permissions = {"GET": PERM_VIEW}

    @document(
        operation_id="ready",
        responses={
            200: responses.Ready,
            503: OpenApiResponse(responses.ErrorBody, description="details.checks: each part"),
            **error_responses(401, 403),
        },
    )
    def get(self, request: Request) -> Response:
        """Answer 200 when every part is ready, else 503 naming the failing parts."""
        checks = readiness()
        failing = sorted(name for name, check in checks.items() if not check["ok"])
        if failing:
            message = "not ready: " + ", ".join(failing)
            raise Unavailable(message, code="not_ready", details={"checks": checks})
        return render(responses.Ready, {"ready": True, "checks": checks})
