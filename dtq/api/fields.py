"""Serializer fields shared by the API's request and response serializers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dtq.engine import ids
from dtq.engine.keys import QUEUE_NAME
from dtq.options import InvalidOption, naive_message

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


def _checked(check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except InvalidOption as exc:
        raise serializers.ValidationError(str(exc)) from None


class OptionIntegerField(serializers.IntegerField):
    """A whole-number task option checked by dtq.options (the message @dtq.task gives)."""

    def __init__(self, check: Callable[[Any], Any], **kwargs: Any) -> None:
        self.check = check
        super().__init__(**kwargs)  # min/max stay for the schema; check() speaks first

    def to_internal_value(self, data: Any) -> Any:
        return _checked(self.check, super().to_internal_value(data))


class OptionFloatField(serializers.FloatField):
    """A numeric task option checked by dtq.options (the message @dtq.task gives)."""

    def __init__(self, check: Callable[[Any], Any], **kwargs: Any) -> None:
        self.check = check
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            _checked(self.check, data)  # a JSON number: the message shows it as sent
        return _checked(self.check, super().to_internal_value(data))


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 datetime with a time zone: a naive one is refused, never taken as local."""

    def enforce_timezone(self, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise serializers.ValidationError(naive_message(self.field_name or "", value))
        return super().enforce_timezone(value)


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
