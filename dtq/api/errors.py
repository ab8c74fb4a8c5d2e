"""The API's single error shape, and the exception handler that produces it for every 4xx/5xx.

Every error body is ``{"error": {"code": "...", "message": "...", "details": {...}}}``; no
traceback ever reaches a client (unexpected exceptions are logged with the request id).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from dtq.engine import errors as engine
from dtq.engine import refusals
from dtq.engine.connection import describe, is_outage

log = logging.getLogger("dtq.api")


class ApiError(exceptions.APIException):
    """Raised by views for an error response with its own status, code and details."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "bad request"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message or self.default_detail, code or self.default_code)
        self.details = details or {}
        self.headers = headers or {}


class BadRequest(ApiError):
    """Raised for a request whose parameters are invalid (400)."""


class NotFound(ApiError):
    """Raised when the addressed resource does not exist (404)."""

    status_code = status.HTTP_404_NOT_FOUND
    default_code = "not_found"
    default_detail = "not found"


class Conflict(ApiError):
    """Raised when the resource's current state forbids the action (409)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class Unprocessable(ApiError):
    """Raised when a well-formed request contradicts earlier ones (422)."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "unprocessable"


class PayloadTooLarge(ApiError):
    """Raised when a request body or task payload is over its limit (413)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


class UnsupportedMedia(ApiError):
    """Raised when a body is not UTF-8 JSON (415)."""

    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    default_code = "unsupported_media_type"


class TooManyRequests(ApiError):
    """Raised when a queue is full; carries Retry-After (429)."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "queue_full"


class RedisRefused(ApiError):
    """Raised when Redis refused one command of the request; Redis itself is up (400)."""

    default_code = "redis_refused"


class Unavailable(ApiError):
    """Raised when a dependency (Redis, scheduler, reaper) is not usable (503)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "unavailable"


def body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the error document."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def from_engine(exc: engine.DtqError) -> ApiError:
    """Translate an engine exception into the API error it means for a client."""
    message = str(exc)
    match exc:
        case engine.QueueFull():
            return TooManyRequests(
                message,
                details={"queue": exc.queue, "limit": exc.limit, "retry_after": exc.retry_after},
                headers={"Retry-After": str(exc.retry_after)},
            )
        case engine.IdempotencyInProgress():
            return Conflict(
                message, code="idempotency_in_progress", details={"task_id": exc.task_id}
            )
        case engine.IdempotencyConflict():
            return Unprocessable(
                message, code="idempotency_conflict", details={"task_id": exc.task_id}
            )
        case engine.PayloadError():
            return PayloadTooLarge(message)
        case engine.WritesRefused():
            return Unavailable(
                message,
                code="redis_refuses_writes",
                details={"reason": exc.reason, "redis": exc.detail},
                headers={"Retry-After": "5"},
            )
        case engine.NotReplicated():
            counts = {"wanted": exc.wanted, "replicas": exc.got}
            return Unavailable(message, code="not_replicated", details=counts)
        case engine.SubmitError() | engine.InvalidTaskError() | engine.InvalidOperation():
            return BadRequest(message, code="invalid")
        case engine.TaskNotFound():
            return NotFound(message, code="task_not_found")
        case engine.NotInDeadLetterQueue():
            return NotFound(message, code="not_in_dlq", details={"task_id": exc.task_id})
        case engine.NotRetryable():
            details = {"task_id": exc.task_id, "state": exc.state}
            return Conflict(message, code="not_retryable", details=details)
        case engine.TaskAlreadyFinished():
            details = {"task_id": exc.task_id, "state": exc.state}
            return Conflict(message, code="task_finished", details=details)
        case engine.OperationInProgress():
            return Conflict(message, code="in_progress", headers={"Retry-After": "1"})
        case engine.AuditUnavailable():
            return Unavailable(message, code="audit_unavailable")
        case engine.ReadBudgetExceeded():
            return BadRequest(message, code="read_budget", details={"limit": exc.limit})
    return Conflict(message, code="refused")


def from_redis(exc: RedisError) -> ApiError:
    """Translate a Redis error: 503 when Redis is down or refusing writes, else a 400."""
    code = refusals.reason(exc)
    if code is not None:
        return Unavailable(
            f"redis refuses writes ({refusals.describe(exc)}); retry later",
            code="redis_refuses_writes",
            details={"reason": code},
            headers={"Retry-After": "5"},
        )
    if is_outage(exc):
        message = f"Redis is not reachable: {type(exc).__name__}"
        return Unavailable(message, code="redis_unavailable", headers={"Retry-After": "1"})
    log.warning("redis refused a request's command error=%s", describe(exc))
    return RedisRefused(f"Redis refused the request: {describe(exc)}")


def _drf_error(exc: exceptions.APIException) -> tuple[str, str, dict[str, Any]]:
    """Return (code, message, details) for a DRF exception."""
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        return "invalid", "the request has invalid fields", {"fields": fields}
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else exc.default_code
    details: dict[str, Any] = {}
    wait = getattr(exc, "wait", None)
    if wait:
        details["retry_after"] = int(wait)
    return str(code), str(exc.detail), details


def handle(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF exception handler: every error, expected or not, in the one error shape."""
    if isinstance(exc, Http404):
        exc = NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, engine.DtqError):
        exc = from_engine(exc)
    elif isinstance(exc, RedisError):
        exc = from_redis(exc)
    if not isinstance(exc, exceptions.APIException):
        set_rollback()  # only for the unexpected: a 4xx or 503 rolls nothing back
        request = context.get("request")
        log.exception("api error request_id=%s", getattr(request, "dtq_request_id", ""))
        return Response(body("internal_error", "internal server error; see the server log"), 500)
    headers = dict(getattr(exc, "headers", {}) or {})
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, ApiError):
        code, message, details = str(exc.get_codes()), str(exc.detail), exc.details
    else:
        code, message, details = _drf_error(exc)
    return Response(body(code, message, details), status=exc.status_code, headers=headers)


@csrf_exempt  # it changes nothing; a CSRF failure page would break the error shape
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Answer an unknown path under the API's mount point in the error shape."""
    return JsonResponse(body("not_found", f"no API endpoint at {request.path}"), status=404)
