"""The operator actions the audit log records: their names and labels, in one place.

AuditEntry.action takes its choices from here, audited() accepts only these, and the API's
audit-log filter offers exactly these.
"""

from __future__ import annotations

from enum import StrEnum


class AuditAction(StrEnum):
    """One kind of audited operator action (the value is what AuditEntry.action stores)."""

    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    REPLAY = "replay"
    DISCARD = "discard"
    DLQ_PURGE = "dlq_purge"
    PURGE = "purge"
    PERIODIC_PAUSE = "periodic_pause"
    PERIODIC_RESUME = "periodic_resume"
    PERIODIC_RUN = "periodic_run"
    PERIODIC_EDIT = "periodic_edit"
    SUBMIT = "submit"
    QUEUE_LIMIT = "queue_limit"

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    AuditAction.CANCEL: "cancel task",
    AuditAction.PAUSE: "pause queue",
    AuditAction.RESUME: "resume queue",
    AuditAction.REPLAY: "replay from DLQ",
    AuditAction.DISCARD: "discard from DLQ",
    AuditAction.DLQ_PURGE: "purge DLQ",
    AuditAction.PURGE: "purge queue",
    AuditAction.PERIODIC_PAUSE: "pause schedule",
    AuditAction.PERIODIC_RESUME: "resume schedule",
    AuditAction.PERIODIC_RUN: "run schedule now",
    AuditAction.PERIODIC_EDIT: "edit schedule",
    AuditAction.SUBMIT: "run a task by hand",
    AuditAction.QUEUE_LIMIT: "change queue limits",
}

# AuditEntry.action's choices (the migrations hold the same list, in this order).
CHOICES = [(action.value, action.label) for action in AuditAction]
