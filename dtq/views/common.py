"""What every dtq admin page shares: permissions, the admin context, URL names, form values."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import events, read_side
from dtq.engine.audit import Actor, request_id_or_new
from dtq.engine.connection import describe, is_outage
from dtq.engine.errors import ReadBudgetExceeded
from dtq.engine.keys import QUEUE_NAME
from dtq.models import (
    PERM_CANCEL,
    PERM_DISCARD,
    PERM_PAUSE,
    PERM_PURGE,
    PERM_REPLAY,
    PERM_SUBMIT,
    PERM_VIEW,
    TaskQueue,
)

log = logging.getLogger("dtq.admin")
PERMS = {
    "view": PERM_VIEW,
    "cancel": PERM_CANCEL,
    "replay": PERM_REPLAY,
    "discard": PERM_DISCARD,
    "purge": PERM_PURGE,
    "pause": PERM_PAUSE,
    "submit": PERM_SUBMIT,
}
URL_PREFIX = "dtq_taskqueue"
WS_PATH = "ws/dtq/events/"  # dtq.routing mounts the event socket here, at the site root
MAX_REASON = 500

View = Callable[..., HttpResponse]


def url_name(name: str) -> str:
    """Return the admin URL name of one of dtq's pages (e.g. 'tasks')."""
    return f"{URL_PREFIX}_{name}"


def admin_url(name: str, *args: Any) -> str:
    """Reverse one of dtq's admin pages."""
    return reverse(f"admin:{url_name(name)}", args=args)


def can(request: HttpRequest) -> dict[str, bool]:
    """Return which dtq actions the user may take, by short name."""
    user = request.user
    return {short: user.has_perm(perm) for short, perm in PERMS.items()}


def require(action: str) -> Callable[[View], View]:
    """Refuse the view (403) unless the user holds the permission of `action`.

    A Redis error inside the view becomes an error page: 503 when Redis is down, else 400.
    """
    perm = PERMS[action]

    def decorate(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(perm):
                raise PermissionDenied(f"needs the {perm} permission")
            # One read budget per page view: whatever it shows, it costs Redis a bounded amount.
            with read_side.read_budget():
                try:
                    return view(request, *args, **kwargs)
                except ReadBudgetExceeded as exc:
                    return HttpResponseBadRequest(str(exc), content_type="text/plain")
                except RedisError as exc:
                    return redis_error_page(request, kwargs.get("site"), exc)

        return checked

    return decorate


def redis_error_page(request: HttpRequest, site: AdminSite | None, exc: RedisError) -> HttpResponse:
    """Render a Redis error: 503 for an outage, 400 when Redis refused one command."""
    if is_outage(exc):
        status, title = 503, "Redis is not reachable"
        message = f"{type(exc).__name__}. The page works again once Redis answers."
    else:
        status, title = 400, "Redis refused the request"
        message = describe(exc)
        log.warning("redis refused an admin request's command error=%s", message)
    context = {**(site.each_context(request) if site else {}), "title": title, "message": message}
    context["opts"] = TaskQueue._meta
    return TemplateResponse(request, "dtq/error.html", context, status=status)


def page_context(request: HttpRequest, site: AdminSite, title: str, **extra: Any) -> dict[str, Any]:
    """Return the admin's context for a dtq page, with permissions and the live-feed start."""
    return {
        **site.each_context(request),
        "title": title,
        "opts": TaskQueue._meta,
        "can": can(request),
        "last_event_id": events.latest_id(),
        "ws_path": "/" + WS_PATH,
        **extra,
    }


def actor(request: HttpRequest) -> Actor:
    """Return the audited actor behind an admin request."""
    return Actor.for_user(
        request.user,
        "admin",
        request_id=request_id_or_new(request.headers.get("X-Request-ID")),
        client_address=request.META.get("REMOTE_ADDR"),
    )


def queue_param(value: str | None) -> str | None:
    """Return value when it is a valid queue name, else None."""
    return value if value and QUEUE_NAME.fullmatch(value) else None


MORE_TASKS = "One request takes at most {limit} tasks: more remain, purge again to continue."
MORE_ENTRIES = "One request takes at most {limit} entries: more may remain, run it again."


def bulk_limit() -> int:
    """Return how many tasks or DLQ entries one admin request may act on."""
    return dtq_settings.BULK_REQUEST_LIMIT


def reason_param(request: HttpRequest) -> str:
    """Return the stripped, bounded reason the operator typed."""
    return (request.POST.get("reason") or "").strip()[:MAX_REASON]


def moment(seconds: Any) -> datetime | None:
    """Return an aware datetime for epoch seconds (None for anything else)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def dated(record: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of a task record with its time fields as datetimes, for templates."""
    return record | {name: moment(record.get(name)) for name in read_side.MS_FIELDS}


def dated_event(event: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of an event with `at`, a datetime from its millisecond `ts`."""
    ts = event.get("ts")
    return event | {"at": moment(ts / 1000 if isinstance(ts, (int, float)) else None)}
