"""Serializer fields shared by the API's request and response serializers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dtq.engine import ids
from dtq.engine.keys import QUEUE_NAME

QUEUE_NAME_MESSAGE = "use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"


class QueueNameField(serializers.CharField):
    """A queue name, checked against the engine's one pattern (keys.QUEUE_NAME)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 64)
        super().__init__(**kwargs)
        self.validators.append(RegexValidator(QUEUE_NAME, QUEUE_NAME_MESSAGE))


class TaskIdField(serializers.CharField):
    """A dtq task id (22 characters of Crockford base32)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 22)
        super().__init__(**kwargs)
        self.validators.append(RegexValidator(ids.ID_PATTERN, "not a dtq task id"))


@extend_schema_field(OpenApiTypes.DATETIME)
class EpochField(serializers.Field):
    """Epoch seconds from the engine, shown as an ISO 8601 UTC datetime (or null)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> str | None:
        if value is None:
            return None
        moment = datetime.fromtimestamp(float(value), UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_json_value(value: Any) -> Any:
    """Raise ValidationError when value cannot be stored as a task argument (e.g. huge ints)."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise serializers.ValidationError(f"not storable as JSON: {exc}") from None
    return value


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.DictField):
    """A JSON object with arbitrary members."""
