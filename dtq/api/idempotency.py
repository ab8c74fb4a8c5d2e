"""Idempotency keys of API submissions: scoped per user, and errors that leak no task id.

With DTQ["API_IDEMPOTENCY_SCOPE"] = "user" (the default) a key names one logical task of the
user who sent it: it is stored as ``user:<pk>:<key>``, so another user cannot take a key first
and then read the owner's task id from a 409/422. With "queue" every user shares the queue's
keys; an error then names the task only for callers allowed to view tasks.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dtq.api.errors import ApiError, Conflict, Unprocessable
from dtq.conf import dtq_settings
from dtq.engine.errors import IdempotencyConflict, IdempotencyInProgress
from dtq.models import PERM_VIEW

MAX_STORED = 200  # what the engine accepts (IDEMPOTENCY_KEY)


def _per_user() -> bool:
    return dtq_settings.API_IDEMPOTENCY_SCOPE == "user"


def stored_key(user: Any, key: str) -> str:
    """Return the key as the engine stores it for this user's submission."""
    if not _per_user():
        return key
    scoped = f"user:{user.pk}:{key}"
    if len(scoped) <= MAX_STORED:
        return scoped
    # Too long with the prefix: a digest keeps it unique and within the engine's limit.
    return f"user:{user.pk}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def error(exc: IdempotencyConflict | IdempotencyInProgress, user: Any, key: str) -> ApiError:
    """Return the API error for a refused key, naming the task only if the caller may see it."""
    visible = _per_user() or user.has_perm(PERM_VIEW)
    task = f" as task {exc.task_id}" if visible else ""
    details = {"task_id": exc.task_id} if visible else {}
    if isinstance(exc, IdempotencyInProgress):
        message = f"idempotency key {key!r} is in progress{task}"
        return Conflict(message, code="idempotency_in_progress", details=details)
    message = f"idempotency key {key!r} was used{task} with another task or payload"
    return Unprocessable(message, code="idempotency_conflict", details=details)
