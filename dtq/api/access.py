"""Who may call the API: authentication, per-action permissions, the metrics token, throttling.

Every endpoint but health/ needs an authenticated user holding the permission of its action;
anonymous requests get 401, users without the permission 403. Being staff grants nothing.
"""

from __future__ import annotations

import hmac
from typing import Any

from django.apps import apps
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

from dtq.conf import dtq_settings
from dtq.engine.audit import Actor, request_id_or_new

REQUEST_ID_HEADER = "HTTP_X_REQUEST_ID"


class ApiSessionAuthentication(SessionAuthentication):
    """Django session login; answers 401 (not DRF's 403) to requests without credentials."""

    def authenticate_header(self, request: Request) -> str:
        return 'Session realm="dtq"'


def authenticators() -> list[BaseAuthentication]:
    """Return DRF token authentication (when its app is installed) and session authentication."""
    found: list[BaseAuthentication] = []
    if apps.is_installed("rest_framework.authtoken"):
        from rest_framework.authentication import TokenAuthentication

        found.append(TokenAuthentication())
    found.append(ApiSessionAuthentication())
    return found


class HasActionPermission(BasePermission):
    """Allow a user holding the permission the view names for the request's method."""

    def has_permission(self, request: Request, view: Any) -> bool:
        permission = view.permission_for(request)
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(permission))


def _bearer(request: Request) -> str:
    scheme, _, credential = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else ""


class MetricsTokenOrPermission(HasActionPermission):
    """Allow the configured DTQ['METRICS_TOKEN'] as a bearer token, or the view permission."""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = dtq_settings.METRICS_TOKEN
        given = _bearer(request)
        if token and given and hmac.compare_digest(given.encode(), str(token).encode()):
            return True
        return super().has_permission(request, view)


class SubmitThrottle(UserRateThrottle):
    """Throttle task submissions per user at DTQ['API_SUBMIT_THROTTLE'] (None: unlimited)."""

    scope = "dtq_submit"

    def get_rate(self) -> str | None:
        return dtq_settings.API_SUBMIT_THROTTLE

    def allow_tasks(self, request: Request, view: Any, count: int) -> bool:
        """Like allow_request, for `count` submissions at once: a bulk request counts each."""
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) + count > self.num_requests:
            return self.throttle_failure()
        self.history[:0] = [self.now] * count
        self.cache.set(self.key, self.history, self.duration)
        return True


class ReadThrottle(UserRateThrottle):
    """Throttle reads per user (or client address) at DTQ['API_READ_THROTTLE'].

    Its DRF scope is dtq_read: with the setting None, REST_FRAMEWORK's
    DEFAULT_THROTTLE_RATES['dtq_read'] applies when given; else reads are not throttled.
    """

    scope = "dtq_read"

    def get_rate(self) -> str | None:
        return dtq_settings.API_READ_THROTTLE or self.THROTTLE_RATES.get(self.scope)


def request_id(request: Request) -> str:
    """Return the request's id: a well-formed X-Request-ID header, else a new one."""
    current = getattr(request._request, "dtq_request_id", None)
    if current:
        return str(current)
    value = request_id_or_new(request.META.get(REQUEST_ID_HEADER))
    request._request.dtq_request_id = value
    return value


def actor(request: Request) -> Actor:
    """Return the audit actor of a request: its user, request id and client address."""
    return Actor.for_user(
        request.user,
        "api",
        request_id=request_id(request),
        client_address=request.META.get("REMOTE_ADDR") or None,
    )
