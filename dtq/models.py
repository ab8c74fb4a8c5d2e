"""Database models: the audit log of operator actions, and the holder of dtq's permissions."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

# Permission names (app label "dtq") for the admin and the API to check.
PERM_VIEW = "dtq.view_queues"
PERM_CANCEL = "dtq.cancel_task"
PERM_REPLAY = "dtq.replay_task"
PERM_DISCARD = "dtq.discard_task"
PERM_PURGE = "dtq.purge_queue"
PERM_PAUSE = "dtq.pause_queue"
PERM_SUBMIT = "dtq.submit_task"


class AuditEntry(models.Model):
    """One operator action (cancel, pause, replay, discard, purge), its actor and its outcome."""

    class Action(models.TextChoices):
        CANCEL = "cancel", "cancel task"
        PAUSE = "pause", "pause queue"
        RESUME = "resume", "resume queue"
        REPLAY = "replay", "replay from DLQ"
        DISCARD = "discard", "discard from DLQ"
        DLQ_PURGE = "dlq_purge", "purge DLQ"
        PURGE = "purge", "purge queue"
        SUBMIT = "submit", "run a task by hand"

    class Source(models.TextChoices):
        COMMAND = "command", "management command"
        ADMIN = "admin", "admin"
        API = "api", "REST API"

    class Outcome(models.TextChoices):
        STARTED = "started", "started"  # still running, or its process died before the end
        OK = "ok", "ok"
        REFUSED = "refused", "refused"  # the engine said no (already finished, not found...)
        ERROR = "error", "error"

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_name = models.CharField(max_length=150)
    source = models.CharField(max_length=16, choices=Source.choices)
    action = models.CharField(max_length=16, choices=Action.choices, db_index=True)
    queue = models.CharField(max_length=64, blank=True, db_index=True)
    task_id = models.CharField(max_length=32, blank=True, db_index=True)
    parameters = models.JSONField(default=dict, blank=True)
    affected = models.PositiveIntegerField(default=0)
    reason = models.TextField(blank=True)
    request_id = models.CharField(max_length=128, blank=True)
    client_address = models.GenericIPAddressField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, default=Outcome.STARTED, db_index=True
    )
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        default_permissions = ("view",)  # the log is written by dtq only, never edited

    def __str__(self) -> str:
        target = self.task_id or self.queue or "-"
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {target}"


class TaskQueue(models.Model):
    """Holds dtq's permissions for the admin pages and the API; it has no table."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "task queue"
        permissions = [
            ("view_queues", "Can view queues, tasks, workers and the DLQ"),
            ("cancel_task", "Can cancel tasks"),
            ("replay_task", "Can replay dead-lettered tasks"),
            ("discard_task", "Can discard dead-lettered tasks"),
            ("purge_queue", "Can purge queues and dead-letter queues"),
            ("pause_queue", "Can pause and resume queues"),
            ("submit_task", "Can submit tasks through the API"),
        ]
