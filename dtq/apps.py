"""Django app config: registers system checks and discovers tasks."""

from __future__ import annotations

from django.apps import AppConfig


class DtqConfig(AppConfig):
    """The dtq app."""

    name = "dtq"
    verbose_name = "Task queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dtq import checks, tracing  # noqa: F401  (checks: registers the checks)
        from dtq.engine import registry

        tracing.install()  # carries trace context when OpenTelemetry is installed
        registry.autodiscover()
