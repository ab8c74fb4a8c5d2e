"""Who performs an operator action, and the one audit row each action writes."""

from __future__ import annotations

import getpass
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections
from django.utils import timezone

from dtq.engine.actions import AuditAction
from dtq.engine.audit_db import audit_alias
from dtq.engine.errors import AuditUnavailable, DtqError, InvalidOperation

log = logging.getLogger("dtq.audit")
SOURCES = ("command", "admin", "api")
_sqlite_writes = threading.Lock()


REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
QUEUE_CHARS, TASK_ID_CHARS = 64, 32  # the widths of AuditEntry.queue and .task_id


def request_id_or_new(given: str | None) -> str:
    """Return given when it is a well-formed request id (X-Request-ID), else a new one."""
    return given if given and REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _write_lock(alias: str) -> Any:
    # SQLite has one writer at a time, and its shared in-memory databases (Django's test
    # databases) fail at once instead of waiting: serialize this process's audit writes there.
    return _sqlite_writes if connections[alias].vendor == "sqlite" else nullcontext()


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
        if self.request_id and not REQUEST_ID.fullmatch(self.request_id):
            raise ValueError(f"malformed request id {self.request_id!r}")

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
    on_count: Callable[[], None] | None = field(default=None, repr=False)

    def count(self, affected: int) -> None:
        """Record what the action has done so far; its row is updated batch by batch."""
        self.affected = affected
        if self.on_count is not None:
            self.on_count()


@contextmanager
def audited(
    actor: Actor,
    action: AuditAction,
    *,
    queue: str = "",
    task_id: str = "",
    reason: str = "",
    parameters: dict[str, Any] | None = None,
) -> Iterator[Report]:
    """Write the action's audit row before it starts, then record how it ended.

    The row is written and committed on a connection of its own (audit_db), so the caller's
    transaction cannot roll it back, and it exists before Redis changes: a process killed
    mid-purge leaves a trace (outcome 'started'). Engine refusals are 'refused', anything else
    raised is 'error'; either way `affected` is what the action really did up to then.
    """
    from dtq.models import AuditEntry

    action = AuditAction(action)  # a name outside the one list is a bug: fail before any row
    report = Report(queue=queue, task_id=task_id, parameters=dict(parameters or {}))
    _check_text(reason, report.parameters)
    with audit_alias() as alias:
        entry = _start(AuditEntry, alias, actor, action, reason, report)
        report.on_count = lambda: _checkpoint(entry, alias, report)
        try:
            yield report
            _replicated(action)
        except DtqError as exc:
            _finish(entry, alias, report, AuditEntry.Outcome.REFUSED, str(exc))
            raise
        except BaseException as exc:
            _finish(entry, alias, report, AuditEntry.Outcome.ERROR, f"{type(exc).__name__}: {exc}")
            raise
        _finish(entry, alias, report, AuditEntry.Outcome.OK, report.detail)


def _replicated(action: str) -> None:
    """Wait for SUBMIT_REPLICAS replicas to have what the action wrote (NotReplicated if not)."""
    from dtq.engine import durable, shards

    if durable.wanted() > 0:
        # A queue-wide action wrote to every shard: wait on each primary that holds one.
        reached: set[int] = set()
        for keys in shards.every():
            client = shards.client(keys.shard)
            if id(client) not in reached:
                reached.add(id(client))
                durable.confirm_writes(client, keys, f"the {action} action")


def _check_text(reason: str, parameters: dict[str, Any]) -> None:
    # PostgreSQL stores no NUL character in text or JSON; refuse it here, with a clear message,
    # instead of failing on the INSERT.
    if _has_nul(reason) or _has_nul(parameters):
        raise InvalidOperation("the reason and the filters cannot contain NUL characters")


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


def _start(model: Any, alias: str, actor: Actor, action: str, reason: str, report: Report) -> Any:
    try:
        with _write_lock(alias):
            return model.objects.using(alias).create(
                actor_id=getattr(actor.user, "pk", None),
                actor_name=actor.name[:150],
                source=actor.source,
                action=action,
                queue=_clip(report.queue, QUEUE_CHARS),
                task_id=_clip(report.task_id, TASK_ID_CHARS),
                parameters=report.parameters,
                reason=reason,
                request_id=actor.request_id,
                client_address=actor.client_address,
            )
    except DatabaseError as exc:
        log.error("audit row not written action=%s error=%s", action, _printable(str(exc)))
        raise AuditUnavailable(
            f"the action was not started: its audit row could not be written ({exc})"
        ) from exc


def _checkpoint(entry: Any, alias: str, report: Report) -> None:
    # A process killed mid-purge then leaves a 'started' row that counts the batches done.
    try:
        with _write_lock(alias):
            type(entry).objects.using(alias).filter(pk=entry.pk).update(affected=report.affected)
    except DatabaseError as exc:  # the action goes on; the closing update tries again
        log.warning("audit row not updated id=%s error=%s", entry.pk, _printable(str(exc)))


def _finish(entry: Any, alias: str, report: Report, outcome: str, detail: str) -> None:
    entry.outcome = outcome
    entry.detail = detail
    entry.affected = report.affected
    entry.queue = _clip(report.queue, QUEUE_CHARS) or entry.queue
    entry.task_id = _clip(report.task_id, TASK_ID_CHARS) or entry.task_id
    entry.parameters = report.parameters
    entry.finished_at = timezone.now()
    try:
        with _write_lock(alias):
            entry.save(using=alias)
    except DatabaseError as exc:
        # The action is done: failing the request now would tell the client less than what
        # happened. The row keeps 'started'; the log line below carries the real outcome.
        log.error("audit row not closed id=%s error=%s", entry.pk, _printable(str(exc)))
    log.info(
        "audit id=%s actor=%s source=%s action=%s queue=%s task_id=%s affected=%s outcome=%s",
        entry.pk,
        _printable(entry.actor_name),
        entry.source,
        entry.action,
        _printable(entry.queue),
        _printable(entry.task_id),
        entry.affected,
        outcome,
    )


def _clip(text: str, length: int) -> str:
    # A refused action may name an invalid queue; its row keeps what fits in the column.
    return text[:length]


def _printable(text: str) -> str:
    # Values in a log line never carry a line break or other control character of their own.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
