"""Who performs an operator action, and the one audit row each action writes."""

from __future__ import annotations

import getpass
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from dtq.engine.errors import DtqError

log = logging.getLogger("dtq.audit")
SOURCES = ("command", "admin", "api")
_sqlite_writes = threading.Lock()


def _write_lock() -> Any:
    # SQLite has one writer at a time, and its shared in-memory databases (Django's test
    # databases) fail at once instead of waiting: serialize this process's audit writes there.
    return _sqlite_writes if connection.vendor == "sqlite" else nullcontext()


@dataclass(frozen=True, slots=True, kw_only=True)
class Actor:
    """The operator behind an action and the surface it came through."""

    name: str
    source: str  # command | admin | api
    user: Any = None  # a Django user for admin/API actions
    request_id: str = ""
    client_address: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        if not self.name:
            raise ValueError("an actor needs a name")

    @classmethod
    def command(cls) -> Actor:
        """Return the actor of a management command: the OS user running it."""
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry / no login name (containers)
            name = "unknown"
        return cls(name=name, source="command")

    @classmethod
    def for_user(
        cls, user: Any, source: str, request_id: str = "", client_address: str | None = None
    ) -> Actor:
        """Return the actor of an admin or API request made by a Django user."""
        return cls(
            name=user.get_username(),
            source=source,
            user=user if getattr(user, "pk", None) is not None else None,
            request_id=request_id,
            client_address=client_address or None,
        )


@dataclass(slots=True)
class Report:
    """What an action fills in while it runs; written to its audit row at the end."""

    queue: str = ""
    task_id: str = ""
    affected: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    detail: str = ""


@contextmanager
def audited(
    actor: Actor,
    action: str,
    *,
    queue: str = "",
    task_id: str = "",
    reason: str = "",
    parameters: dict[str, Any] | None = None,
) -> Iterator[Report]:
    """Write the action's audit row before it starts, then record how it ended.

    The row exists before Redis changes, so even a process killed mid-purge leaves a trace
    (outcome 'started'). Engine refusals are 'refused', anything else raised is 'error'.
    """
    from dtq.models import AuditEntry

    report = Report(queue=queue, task_id=task_id, parameters=dict(parameters or {}))
    with _write_lock():
        entry = _create(AuditEntry, actor, action, queue, task_id, reason, report)
    try:
        yield report
    except DtqError as exc:
        _finish(entry, report, AuditEntry.Outcome.REFUSED, str(exc))
        raise
    except BaseException as exc:
        _finish(entry, report, AuditEntry.Outcome.ERROR, f"{type(exc).__name__}: {exc}")
        raise
    _finish(entry, report, AuditEntry.Outcome.OK, report.detail)


def _create(
    model: Any, actor: Actor, action: str, queue: str, task_id: str, reason: str, report: Report
) -> Any:
    return model.objects.create(
        actor=actor.user,
        actor_name=actor.name[:150],
        source=actor.source,
        action=action,
        queue=queue,
        task_id=task_id,
        parameters=report.parameters,
        reason=reason,
        request_id=actor.request_id[:128],
        client_address=actor.client_address,
    )


def _finish(entry: Any, report: Report, outcome: str, detail: str) -> None:
    entry.outcome = outcome
    entry.detail = detail
    entry.affected = report.affected
    entry.queue = report.queue or entry.queue
    entry.task_id = report.task_id or entry.task_id
    entry.parameters = report.parameters
    entry.finished_at = timezone.now()
    with _write_lock():
        entry.save()
    log.info(
        "audit id=%s actor=%s source=%s action=%s queue=%s task_id=%s affected=%s outcome=%s",
        entry.pk,
        entry.actor_name,
        entry.source,
        entry.action,
        entry.queue,
        entry.task_id,
        entry.affected,
        outcome,
    )
