"""JSON encoding for payloads, results and errors (never pickle)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from dtq.engine.errors import PayloadError


def dumps(value: Any) -> str:
    """Encode value as compact JSON text."""
    return orjson.dumps(value).decode()


def loads(text: str | bytes) -> Any:
    """Decode JSON text."""
    return orjson.loads(text)


def encode_payload(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    limit: int,
    ctx: dict[str, Any] | None = None,
    workflow: str = "",
    member: int = 0,
) -> str:
    """Encode task arguments, refusing what JSON cannot carry or what exceeds limit bytes.

    ctx holds the propagated context values (dtq.propagation), stored only when there are any;
    workflow and member name the workflow and place of a member task (the worker reads them
    to count its outcome there).
    """
    envelope: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
    if ctx:
        envelope["ctx"] = ctx
    if workflow:
        envelope["wf"], envelope["wfm"] = workflow, member
    try:
        text = orjson.dumps(envelope)
    except TypeError as exc:
        raise PayloadError(f"task arguments must be JSON-serializable: {exc}") from None
    if limit and len(text) > limit:
        raise PayloadError(f"task arguments are {len(text)} bytes; the limit is {limit}")
    return text.decode()


def fingerprint(name: str, payload: str) -> str:
    """Return a stable digest of a task name and payload, for idempotency checks."""
    return hashlib.blake2b(f"{name}\0{payload}".encode(), digest_size=16).hexdigest()


def truncate(text: str, limit: int) -> str:
    """Cut text to at most limit characters, marking the cut (never mid-character)."""
    # Error text may hold lone surrogates (str(exc) of a decoding error, os.fsdecode'd paths).
    # JSON in UTF-8 cannot carry them, and failing to encode an error would leave the attempt
    # unfinalized, so they are escaped as text.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return text[: max(limit - 20, 0)] + "\n...[truncated]"
