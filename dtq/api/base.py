"""The base view of every dtq API endpoint: JSON in and out, explicit auth, one error shape.

Nothing here depends on the project's REST_FRAMEWORK settings, so a project's defaults can
neither open the API nor change its error format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import MethodNotAllowed
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from dtq.api import access, errors
from dtq.api.parsers import JsonParser, check_content_length
from dtq.engine.audit import Actor
from dtq.engine.read_side import read_budget
from dtq.models import PERM_VIEW

PARTIAL_HEADER = "X-DTQ-Partial"


class DtqView(APIView):
    """An API endpoint; `permissions` maps HTTP methods to the permission each needs."""

    permission_classes = [access.HasActionPermission]
    renderer_classes = [JSONRenderer]
    parser_classes = [JsonParser]
    metadata_class = None  # OPTIONS answers 405 instead of describing the view
    schema = AutoSchema()
    permissions: dict[str, str] = {"GET": PERM_VIEW}
    throttled_methods: tuple[str, ...] = ()

    def get_authenticators(self) -> list[Any]:
        return access.authenticators()

    def get_throttles(self) -> list[BaseThrottle]:
        method = getattr(getattr(self, "request", None), "method", "")
        if method in ("GET", "HEAD"):
            return [access.ReadThrottle()]
        return [access.SubmitThrottle()] if method in self.throttled_methods else []

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # One read budget per request: whatever its parameters, it costs Redis a bounded amount.
        with read_budget() as budget:
            response = super().dispatch(request, *args, **kwargs)
        if budget.partial:  # some read stopped short: say so on every endpoint alike
            response[PARTIAL_HEADER] = "true"
        return response

    def get_exception_handler(self) -> Callable[..., Response]:
        return errors.handle

    def permission_for(self, request: Request) -> str:
        """Return the permission the request's method needs (HEAD needs GET's)."""
        method = "GET" if request.method == "HEAD" else request.method
        return self.permissions[method or ""]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        access.request_id(request)
        method = "GET" if request.method == "HEAD" else request.method
        if method not in self.permissions:  # the map is the allow-list: 405 before 401/403
            raise MethodNotAllowed(request.method or "")
        check_content_length(request.META)  # 413 before any byte of the body is read
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["X-Request-ID"] = access.request_id(request)
        return response

    def actor(self) -> Actor:
        """Return the audit actor of the current request."""
        return access.actor(self.request)


def document(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return drf-spectacular's extend_schema(**kwargs), based on its AutoSchema whatever the
    project's DEFAULT_SCHEMA_CLASS is (extend_schema builds on the function's `schema`)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        func.schema = AutoSchema  # type: ignore[attr-defined]
        return extend_schema(**kwargs)(func)

    return decorate


def valid(serializer_class: type[Serializer], data: Any) -> Serializer:
    """Return a validated serializer, or raise the 400 listing every invalid field."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer


def body(request: Request) -> Any:
    """Return the request's JSON body; an absent body counts as an empty object."""
    data = request.data
    return {} if data is None else data


def render(serializer_class: type[Serializer], data: Any, status: int = 200, **kw: Any) -> Response:
    """Return a response whose body is data shaped by serializer_class."""
    return Response(serializer_class(data).data, status=status, **kw)
