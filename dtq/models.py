"""Database models: the audit log of operator actions, the holder of dtq's permissions, and
periodic schedules defined in the database."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from dtq.engine.actions import CHOICES
from dtq.engine.errors import DtqError


def validate_schedule_name(value: str) -> None:
    """Refuse names a schedule cannot have (they become part of Redis keys)."""
    from django.core.exceptions import ValidationError

    from dtq.engine.firing import NAME

    if not NAME.match(value):
        raise ValidationError("use 1-150 letters, digits and _ . @ + = -")


# Permission names (app label "dtq") for the admin and the API to check.
PERM_VIEW = "dtq.view_queues"
PERM_CANCEL = "dtq.cancel_task"
PERM_REPLAY = "dtq.replay_task"
PERM_DISCARD = "dtq.discard_task"
PERM_PURGE = "dtq.purge_queue"
PERM_PAUSE = "dtq.pause_queue"
PERM_SUBMIT = "dtq.submit_task"
PERM_SCHEDULES = "dtq.change_periodicschedule"  # edit, pause, resume, run now


class AuditEntry(models.Model):
    """One operator action (cancel, pause, replay, discard, purge), its actor and its outcome."""

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
    action = models.CharField(max_length=16, choices=CHOICES, db_index=True)
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


class PeriodicSchedule(models.Model):
    """A periodic schedule managed in the admin or the API (code ones use @dtq.periodic)."""

    class CatchUp(models.TextChoices):
        NONE = "none", "none: skip missed slots"
        LATEST = "latest", "latest: fire the latest missed slot"
        ALL = "all", "all: fire every missed slot within the window"

    class Overlap(models.TextChoices):
        ALLOW = "allow", "allow: fire anyway"
        SKIP = "skip", "skip: skip while the previous firing runs"
        BUFFER_ONE = "buffer_one", "buffer one: fire once the previous firing ends"

    name = models.CharField(max_length=150, unique=True, validators=[validate_schedule_name])
    task = models.CharField(max_length=200, help_text="the registered task name")
    cron = models.CharField(
        max_length=200,
        blank=True,
        help_text="5 fields, or 6 with seconds first; empty: use every_seconds",
    )
    every_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="a fixed interval instead of cron (at least 1)"
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA zone, for cron")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=64, blank=True, help_text="empty: the task's own queue")
    catch_up = models.CharField(max_length=16, choices=CatchUp.choices, default=CatchUp.LATEST)
    catch_up_window_seconds = models.PositiveIntegerField(default=86400)
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.ALLOW)
    enabled = models.BooleanField(default=True, help_text="disabled schedules are not loaded")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "periodic schedule"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Check the definition and the arguments against the task; say what is wrong."""
        from django.core.exceptions import ValidationError

        from dtq.schedules import check_definition

        try:
            check_definition(self.as_schedule())
        except DtqError as exc:
            raise ValidationError(str(exc)) from None

    def as_schedule(self) -> Any:
        """Return the engine Schedule this row defines (InvalidTaskError if it is not valid)."""
        from datetime import timedelta

        from dtq.engine.cron import Timing
        from dtq.engine.errors import InvalidTaskError
        from dtq.engine.firing import Schedule

        if not isinstance(self.args, list) or not isinstance(self.kwargs, dict):
            raise InvalidTaskError("args must be a JSON list and kwargs a JSON object")
        every = timedelta(seconds=self.every_seconds) if self.every_seconds else None
        return Schedule(
            name=self.name,
            timing=Timing.of(self.cron or None, every, self.timezone),
            task_name=self.task,
            args=tuple(self.args),
            kwargs=dict(self.kwargs),
            queue=self.queue or None,
            catch_up=self.catch_up,
            catch_up_window=timedelta(seconds=self.catch_up_window_seconds or 1),
            overlap=self.overlap,
            source="database",
            description=self.description,
        )
