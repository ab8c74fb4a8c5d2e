"""Serializers for what clients send: request bodies and query parameters."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from rest_framework import serializers

from dtq.api.fields import (
    AwareDateTimeField,
    OptionFloatField,
    OptionIntegerField,
    QueueNameField,
    TaskIdField,
    check_json_value,
)
from dtq.conf import dtq_settings
from dtq.engine import registry
from dtq.engine.actions import AuditAction
from dtq.engine.limits import parse_rate
from dtq.engine.read_side import MAX_PAGE
from dtq.engine.state import TaskState
from dtq.options import (
    MAX_ATTEMPTS,
    MAX_PRIORITY,
    MAX_SECONDS,
    MIN_PRIORITY,
    InvalidOption,
    check_delay,
    check_max_attempts,
    check_priority,
    check_seconds,
    delay_of,
)

MAX_BULK_TASKS = 500  # submissions per bulk request: bounds its time and its reply
AUDIT_ACTIONS = tuple(AuditAction)  # the audit log filter offers every recorded action


class SubmitRequest(serializers.Serializer):
    """A task submission: a registered task name, its arguments and submission options."""

    task = serializers.CharField(max_length=200, help_text="name of a registered task")
    args = serializers.ListField(child=serializers.JSONField(), required=False, default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False, default=dict)
    queue_name = QueueNameField(required=False, help_text="default: the task's queue")
    # Each option is checked by dtq.options: the same rule and message as @dtq.task's.
    priority = OptionIntegerField(
        check_priority, min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False
    )
    run_after = AwareDateTimeField(
        required=False, help_text="do not run before this (with a time zone: naive is refused)"
    )
    delay = OptionFloatField(check_delay, min_value=0, max_value=MAX_SECONDS, required=False)
    max_attempts = OptionIntegerField(
        check_max_attempts, min_value=1, max_value=MAX_ATTEMPTS, required=False
    )
    timeout = OptionFloatField(
        partial(check_seconds, "timeout"), min_value=0.001, max_value=MAX_SECONDS, required=False
    )
    ttl = OptionFloatField(
        partial(check_seconds, "ttl"), min_value=0.001, max_value=MAX_SECONDS, required=False
    )

    def validate_task(self, value: str) -> str:
        # Only the registry maps a name to code: nothing taken from a request is imported.
        if registry.get(value) is None:
            raise serializers.ValidationError(f"no task named {value!r} is registered")
        return value

    def validate_args(self, value: list[Any]) -> list[Any]:
        return check_json_value(value)

    def validate_kwargs(self, value: dict[str, Any]) -> dict[str, Any]:
        return check_json_value(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "run_after" in attrs and "delay" in attrs:
            raise serializers.ValidationError({"delay": "give run_after or delay, not both"})
        delay = attrs.pop("delay", None)
        if "run_after" in attrs:
            try:
                delay = delay_of(attrs["run_after"])  # within MAX_DELAY from now
            except InvalidOption as exc:
                raise serializers.ValidationError({exc.option: str(exc)}) from None
        if delay is not None:
            attrs["run_after"] = timedelta(seconds=delay)
        return attrs

    def overrides(self) -> dict[str, Any]:
        """Return the options to apply with Task.using()."""
        return submit_overrides(self.validated_data)


def submit_overrides(data: dict[str, Any]) -> dict[str, Any]:
    """Return the options of one validated submit request to apply with Task.using()."""
    names = ("queue_name", "priority", "max_attempts", "timeout", "ttl", "run_after")
    return {name: data[name] for name in names if name in data}


class BulkSubmitRequest(serializers.Serializer):
    """Many task submissions at once, each one shaped like a single submit request."""

    tasks = SubmitRequest(
        many=True,
        allow_empty=False,
        max_length=MAX_BULK_TASKS,
        help_text=f"1-{MAX_BULK_TASKS} submissions, accepted in this order",
    )


class PageQuery(serializers.Serializer):
    """Page size and position of a list."""

    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, required=False)
    cursor = serializers.CharField(max_length=200, required=False)

    def limit_or_default(self) -> int:
        """Return the requested page size, else DTQ['API_PAGE_SIZE']."""
        default = min(max(dtq_settings.API_PAGE_SIZE, 1), MAX_PAGE)
        return int(self.validated_data.get("limit", default))


class TaskListQuery(PageQuery):
    """Filters of the task list."""

    queue = QueueNameField(required=False)
    state = serializers.ChoiceField(choices=[s.value for s in TaskState], required=False)
    task = serializers.CharField(max_length=200, required=False, help_text="task name")
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    q = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="search: task:NAME queue:Q state:S created>T started>T finished<T "
        "attempt>=N worker:W error:TEXT error.class:C args.0=42 kwargs.user_id=42 args~TEXT "
        "or a bare substring of the arguments' JSON (see docs/api.md)",
    )


class QueueListQuery(PageQuery):
    """Page of the queue list: cursor is the last queue name of the previous page."""

    cursor = QueueNameField(required=False)


class QueueDetailQuery(serializers.Serializer):
    """How much throughput history a queue's detail shows."""

    minutes = serializers.IntegerField(min_value=1, max_value=120, required=False, default=60)


class ReasonRequest(serializers.Serializer):
    """An optional reason, written to the audit row."""

    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class QueueLimitsRequest(ReasonRequest):
    """A change of a queue's limits: a field left out stays as it is; null clears it."""

    max_concurrency = serializers.IntegerField(
        min_value=1, max_value=100_000, required=False, allow_null=True
    )
    rate = serializers.CharField(
        max_length=40, required=False, allow_null=True, help_text='"N/s", "N/m" or "N/h"'
    )
    burst = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)

    def validate_rate(self, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_rate(value)
            except ValueError as exc:
                raise serializers.ValidationError(str(exc)) from None
        return value


class PurgeRequest(serializers.Serializer):
    """A queue purge: a reason is required; dry_run only counts."""

    reason = serializers.CharField(max_length=1000)
    dry_run = serializers.BooleanField(required=False, default=False)
    cursor = serializers.CharField(
        max_length=20, required=False, help_text="next_cursor of the purge's previous part"
    )


class ReplayRequest(ReasonRequest):
    """Replay one DLQ entry, optionally onto another queue."""

    to_queue = QueueNameField(required=False)


class DlqFilterRequest(ReasonRequest):
    """Which entries of one queue's DLQ a bulk replay takes."""

    queue = QueueNameField()
    to_queue = QueueNameField(required=False)
    task = serializers.CharField(max_length=200, required=False, help_text="task name, exact")
    error = serializers.CharField(max_length=200, required=False, help_text="error class part")
    since = serializers.DateTimeField(required=False, help_text="dead-lettered at or after")
    until = serializers.DateTimeField(required=False, help_text="dead-lettered before")
    limit = serializers.IntegerField(
        min_value=1, required=False, help_text="at most BULK_REQUEST_LIMIT (also the default)"
    )
    cursor = serializers.CharField(  # '<entry id>[@<shard>]': 41 + 5 characters at most
        max_length=46, required=False, help_text="next_cursor of the previous request"
    )

    def validate_limit(self, value: int) -> int:
        """Refuse a limit above what one request may do."""
        bound = dtq_settings.BULK_REQUEST_LIMIT
        if value > bound:
            raise serializers.ValidationError(f"at most {bound} per request (BULK_REQUEST_LIMIT)")
        return value


class DlqPurgeRequest(serializers.Serializer):
    """Empty one queue's DLQ: a reason is required; dry_run only counts."""

    queue = QueueNameField()
    reason = serializers.CharField(max_length=1000)
    dry_run = serializers.BooleanField(required=False, default=False)


class DlqListQuery(PageQuery):
    """Which DLQ to list (default: every queue's)."""

    queue = QueueNameField(required=False)


class DlqEntryQuery(serializers.Serializer):
    """Narrow the search for a DLQ entry whose task record expired."""

    queue = QueueNameField(required=False)


class AuditQuery(PageQuery):
    """Filters of the audit log."""

    action = serializers.ChoiceField(choices=AUDIT_ACTIONS, required=False)
    queue = QueueNameField(required=False)
    task_id = TaskIdField(required=False)
    actor = serializers.CharField(max_length=150, required=False)


class EditReplayRequest(ReasonRequest):
    """New values for a failed task's replay or retry; a field left out keeps its value."""

    args = serializers.ListField(child=serializers.JSONField(), required=False)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False)
    queue = QueueNameField(required=False, help_text="a queue the task accepts")
    priority = OptionIntegerField(
        check_priority, min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False
    )

    def validate_args(self, value: list[Any]) -> list[Any]:
        return check_json_value(value)

    def validate_kwargs(self, value: dict[str, Any]) -> dict[str, Any]:
        return check_json_value(value)


class RunRequest(ReasonRequest):
    """Run a registered task by hand (audited): arguments checked against its signature."""

    task = serializers.CharField(max_length=200, help_text="name of a registered task")
    args = serializers.ListField(child=serializers.JSONField(), required=False, default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False, default=dict)
    queue = QueueNameField(required=False, help_text="a queue the task accepts")
    priority = OptionIntegerField(
        check_priority, min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False
    )
    delay = OptionFloatField(
        check_delay, min_value=0, required=False, default=0, help_text="seconds"
    )

    def validate_args(self, value: list[Any]) -> list[Any]:
        return check_json_value(value)

    def validate_kwargs(self, value: dict[str, Any]) -> dict[str, Any]:
        return check_json_value(value)


class BulkPlanRequest(serializers.Serializer):
    """What a bulk action takes: the ticked task ids, or everything matching a search query."""

    q = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, help_text="the task search language"
    )
    task_ids = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        max_length=10_000,
        help_text="ticked rows (at most BULK_REQUEST_LIMIT)",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "task_ids" in attrs and attrs.get("q"):
            raise serializers.ValidationError("give either task_ids or q, not both")
        return attrs


class BulkStartRequest(serializers.Serializer):
    """Start a planned bulk job (the id its dry run returned)."""

    job = serializers.RegexField(r"^[0-9a-f]{32}$", help_text="the id the dry run returned")
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
