"""The API's only parser: UTF-8 JSON, read with a size limit before anything is decoded."""

from __future__ import annotations

import json
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from dtq.api.errors import PayloadTooLarge, UnsupportedMedia
from dtq.conf import dtq_settings


def body_limit() -> int:
    """Return the largest request body the API reads, in bytes."""
    return dtq_settings.API_MAX_BODY_BYTES


def check_content_length(meta: dict[str, Any]) -> None:
    """Refuse a body whose declared length is over the limit, before reading any of it."""
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # Django reads nothing from a body with a malformed length
    if length > body_limit():
        raise PayloadTooLarge(f"the request body is over the {body_limit()}-byte limit")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonParser(BaseParser):
    """Parse application/json bodies: at most API_MAX_BODY_BYTES, UTF-8, strict JSON."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        """Return the decoded JSON document of the request body."""
        charset = _charset(media_type or "")
        if charset not in ("", "utf-8", "utf8"):
            raise UnsupportedMedia(f"bodies must be UTF-8 JSON, not {charset}", code="not_utf8")
        limit = body_limit()
        # Read one byte past the limit: a body without a Content-Length is bounded too.
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsupportedMedia("the request body is not valid UTF-8", code="not_utf8") from None
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"malformed JSON: {exc}"[:300]) from None


def _charset(media_type: str) -> str:
    for param in media_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return ""
