"""The OpenAPI document (drf-spectacular) and its docs page, both needing the view permission.

The schema covers dtq.api.urls only, whatever else the project serves; its server URL is the
mount point the request came through, so paths are the same wherever the app is mounted.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from dtq.api import access, errors
from dtq.api.base import DtqView, document
from dtq.engine.ids import ID_PATTERN
from dtq.models import PERM_VIEW

URLCONF = "dtq.api.urls"
API_SETTINGS = {
    "TITLE": "dtq API",
    "DESCRIPTION": "Tasks, queues, dead-letter queues, workers and the audit log of dtq.",
    "VERSION": "1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "PATH_CONVERTER_OVERRIDES": {"dtq_task_id": {"type": "string", "pattern": ID_PATTERN.pattern}},
    # Workflows and their members have state sets of their own beside the tasks' one.
    "ENUM_NAME_OVERRIDES": {
        "WorkflowStateEnum": "dtq.api.responses.WORKFLOW_STATES",
        "MemberStateEnum": "dtq.api.responses.MEMBER_STATES",
    },
}


class SessionScheme(OpenApiAuthenticationExtension):
    """Describe dtq's session authentication (Django's session cookie) in the schema."""

    target_class = "dtq.api.access.ApiSessionAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}


def mount_point(request: Request) -> str:
    """Return the path the API is mounted at, without its trailing slash (e.g. '/api')."""
    return reverse("dtq-api:schema", request=None).removesuffix("/schema/")


class _Access:
    """Mixin: DtqView's authentication, permission and error handling for spectacular views."""

    permission_classes = [access.HasActionPermission]
    permissions = {"GET": PERM_VIEW}
    metadata_class = None

    def get_authenticators(self) -> list[Any]:
        return access.authenticators()

    def get_exception_handler(self) -> Any:
        return errors.handle

    def permission_for(self, request: Request) -> str:
        return DtqView.permission_for(self, request)  # type: ignore[arg-type]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kw: Any) -> Any:
        if getattr(response, "exception", False):
            # Errors keep the API's JSON shape even on the HTML docs page.
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kw)  # type: ignore[misc]


class SchemaView(_Access, SpectacularAPIView):
    """GET schema/: the OpenAPI 3 document of this API (JSON)."""

    renderer_classes = [OpenApiJsonRenderer, JSONRenderer]
    custom_settings = API_SETTINGS
    serve_public = True  # the document lists every endpoint, whatever this user may call
    urlconf = URLCONF

    @document(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Return the OpenAPI document."""
        return super().get(request, *args, **kwargs)

    def _get_schema_response(self, request: Request) -> Response:
        generator = SchemaGenerator(
            urlconf=self.urlconf, api_version=self.api_version, patterns=None
        )
        schema = generator.get_schema(request=request, public=self.serve_public)
        schema["servers"] = [{"url": mount_point(request)}]
        return Response(schema, headers={"Content-Disposition": 'inline; filename="dtq.json"'})


class DocsView(_Access, SpectacularSwaggerView):
    """GET docs/: Swagger UI for the schema, served from drf-spectacular-sidecar (no CDN)."""

    url_name = "dtq-api:schema"

    @document(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Return the Swagger UI page, its assets served locally by the sidecar package."""
        with patched_settings(API_SETTINGS):
            return super().get(request, *args, **kwargs)
