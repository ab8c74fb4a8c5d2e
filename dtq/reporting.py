"""Django error reports (DEBUG pages, ADMINS e-mails) without the Redis password."""

from __future__ import annotations

from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from dtq.engine.connection import mask_url


class RedisSafeExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter, plus masking the password of every Redis URL among the settings.

    Django hides settings whose names contain KEY, SECRET, PASS, TOKEN...; DTQ['REDIS_URL']
    and a cache's LOCATION carry a password in a value whose name says nothing.
    """

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        value = super().cleanse_setting(key, value)
        if isinstance(value, str) and "://" in value:
            return mask_url(value)
        return value
