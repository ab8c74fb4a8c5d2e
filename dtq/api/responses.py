"""Serializers for what the API returns; every body is built through one, so it fits the schema."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from dtq.api.fields import EpochField, ObjectField
from dtq.engine.read_side import trends
from dtq.engine.read_side.tasks import durations
from dtq.engine.state import TaskState

STATES = [s.value for s in TaskState]
Json = serializers.JSONField


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = ObjectField()


class ErrorBody(serializers.Serializer):
    """The one error shape of every 4xx and 5xx response."""

    error = ErrorDetail()


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """Return schema entries for the given error statuses."""
    return {code: OpenApiResponse(ErrorBody, description=ERROR_TEXT[code]) for code in codes}


ERROR_TEXT = {
    400: "invalid parameters (per-field messages in details.fields)",
    401: "no credentials",
    403: "the user lacks this action's permission",
    404: "no such resource",
    409: "conflict with the resource's current state",
    413: "request body or task payload too large",
    415: "the body is not UTF-8 JSON",
    422: "idempotency key reused with a different request",
    429: "queue full or submissions throttled; see Retry-After",
    503: "Redis, the scheduler or the reaper is not available",
}


class SubmitResult(serializers.Serializer):
    id = serializers.CharField()
    task = serializers.CharField()
    queue_name = serializers.CharField()
    state = serializers.ChoiceField(choices=STATES, allow_null=True)
    duplicate = serializers.BooleanField()
    url = serializers.CharField()


class BulkSubmitResult(serializers.Serializer):
    """The accepted tasks of a bulk submission, in the order they were sent."""

    results = SubmitResult(many=True)


class Progress(serializers.Serializer):
    """The latest progress the running (or last) attempt reported."""

    fraction = serializers.FloatField(min_value=0, max_value=1)
    message = serializers.CharField(allow_blank=True)
    at = EpochField()


class TaskSummary(serializers.Serializer):
    """A task in a list."""

    id = serializers.CharField()
    name = serializers.CharField()
    queue = serializers.CharField()
    state = serializers.ChoiceField(choices=STATES)
    priority = serializers.IntegerField(default=0)
    attempt = serializers.IntegerField(default=0)
    max_attempts = serializers.IntegerField(default=0)
    created_at = EpochField()
    updated_at = EpochField()
    finished_at = EpochField()
    error = Json(allow_null=True, default=None)
    progress = Progress(allow_null=True, default=None)
    wait_seconds = serializers.FloatField(
        allow_null=True, default=None, help_text="from entering the queue to the latest start"
    )
    run_seconds = serializers.FloatField(
        allow_null=True, default=None, help_text="latest attempt: start to end (so far)"
    )


class AttemptRun(serializers.Serializer):
    attempt = serializers.IntegerField(allow_null=True)
    run_seconds = serializers.FloatField()


class TaskDetail(TaskSummary):
    """A task with its arguments, result, errors and attempt history."""

    args = serializers.ListField(child=Json())
    kwargs = ObjectField()
    result = Json(allow_null=True)
    has_result = serializers.BooleanField(default=False)
    errors = serializers.ListField(child=ObjectField())
    history = serializers.ListField(child=ObjectField())
    enqueued_at = EpochField()
    started_at = EpochField()
    run_after = EpochField()
    expires_at = EpochField()
    timeout = serializers.FloatField(allow_null=True, default=None)
    cancel_requested = serializers.BooleanField(default=False)
    idempotency_key = serializers.CharField(allow_blank=True, default="")
    workflow = serializers.CharField(
        allow_blank=True, default="", help_text="the workflow this task is a member of"
    )
    attempt_runs = AttemptRun(many=True, default=list, help_text="run time of each attempt")
    waiting = serializers.SerializerMethodField(
        help_text="why a QUEUED or PENDING task is held back by a limit (flow control), or null"
    )

    def get_waiting(self, record: dict[str, Any]) -> str | None:
        held = record.get("state") in ("QUEUED", "PENDING")
        return (record.get("waiting") or None) if held else None


def task_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Return a decoded record with its durations (records.durations) added."""
    progress = record.get("progress")
    return record | durations(record) | {"progress": progress if _is_progress(progress) else None}


def _is_progress(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("fraction"), (int, float))


def task_detail(record: dict[str, Any]) -> dict[str, Any]:
    """Return a record from read_side.get_task with args/kwargs and errors split out."""
    raw = record.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    history = [h for h in (record.get("history") or []) if isinstance(h, dict)]
    return {
        **task_summary(record),
        "args": payload.get("args") or [],
        "kwargs": payload.get("kwargs") or {},
        "history": history,
        "errors": [h for h in history if h.get("error")],
        "idempotency_key": record.get("idem") or "",
        "workflow": payload.get("wf") or "",
    }


PARTIAL_HELP = (
    "true when the read budget (DTQ['READ_BUDGET'] Redis commands per request) cut this page "
    "short: queues were left out (filter by queue), or it holds fewer than `limit` items "
    "although more may follow (follow next_cursor)"
)


class TaskPage(serializers.Serializer):
    results = TaskSummary(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    partial = serializers.BooleanField(help_text=PARTIAL_HELP)
    scanned = serializers.IntegerField(help_text="task records read for this page")


class ActionResult(serializers.Serializer):
    """What a single-task action did."""

    task_id = serializers.CharField()
    outcome = serializers.CharField()


class QueueLimits(serializers.Serializer):
    """A queue's own flow-control limits and their use (docs/flow-control.md)."""

    max_concurrency = serializers.IntegerField(allow_null=True)
    rate = serializers.CharField(allow_null=True, help_text='e.g. "20/s" or "100/m (burst 5)"')
    in_use = serializers.IntegerField(help_text="slots of the queue's own limit held now")
    waiting = serializers.IntegerField(help_text="tasks waiting for the queue's own limit")
    slots_held = serializers.IntegerField(help_text="every slot held (queue and task limits)")
    tasks_waiting = serializers.IntegerField(help_text="every task waiting for a slot")


class QueueLimitsResult(QueueLimits):
    queue = serializers.CharField()


class Percentiles(serializers.Serializer):
    """Quantiles of one latency, interpolated from the queue's histogram (as /metrics has it)."""

    p50 = serializers.FloatField(allow_null=True, help_text="seconds; null before any task")
    p95 = serializers.FloatField(allow_null=True, help_text="seconds; null before any task")
    count = serializers.IntegerField(help_text="observations in the histogram")


class QueuePercentiles(serializers.Serializer):
    wait = Percentiles(help_text="from entering the queue to the start of an attempt")
    run = Percentiles(help_text="from the start of an attempt to its end")


class QueueSummary(serializers.Serializer):
    """A queue at a glance (per-band lists: index 0 high, 1 normal, 2 low)."""

    name = serializers.CharField()
    paused = serializers.BooleanField()
    depth = serializers.ListField(child=serializers.IntegerField())
    pending = serializers.ListField(child=serializers.IntegerField())
    waiting = serializers.ListField(child=serializers.IntegerField())
    states = serializers.DictField(child=serializers.IntegerField())
    queued = serializers.IntegerField()
    running = serializers.IntegerField()
    scheduled = serializers.IntegerField()
    dlq = serializers.IntegerField()
    counters = serializers.DictField(child=serializers.IntegerField())
    oldest_waiting_age = serializers.FloatField(allow_null=True)
    limits = QueueLimits()
    percentiles = QueuePercentiles(source="latency")

    def to_representation(self, instance: Any) -> Any:
        row = dict(instance)
        row["latency"] = trends.percentiles(instance["latency"])
        return super().to_representation(row)


class QueueList(serializers.Serializer):
    results = QueueSummary(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="the last queue name of this page: pass it as cursor"
    )
    total = serializers.IntegerField(help_text="queues known in all")


class ThroughputRow(serializers.Serializer):
    """One minute of counters; `minute` is the minute's start."""

    minute = EpochField(allow_null=False)
    submitted = serializers.IntegerField()
    started = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    retried = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()


class QueueDetail(QueueSummary):
    throughput = ThroughputRow(many=True)


class PauseResult(serializers.Serializer):
    queue = serializers.CharField()
    paused = serializers.BooleanField()
    changed = serializers.BooleanField()


class PurgeResult(serializers.Serializer):
    """Counts of a queue purge (dry_run: what it would take now)."""

    queue = serializers.CharField()
    dry_run = serializers.BooleanField()
    queued = serializers.IntegerField()
    scheduled = serializers.IntegerField()
    running = serializers.IntegerField(help_text="running tasks, never purged")
    purged = serializers.IntegerField()
    more = serializers.BooleanField(help_text="stopped at BULK_REQUEST_LIMIT: purge again")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="with more: pass as cursor to take the same tasks"
    )


class DlqEntry(serializers.Serializer):
    entry_id = serializers.CharField()
    task_id = serializers.CharField()
    name = serializers.CharField(allow_blank=True)
    queue = serializers.CharField()
    payload = Json(allow_null=True)
    attempts = serializers.IntegerField()
    error = Json(allow_null=True)
    dead_lettered_at = EpochField()
    created_at = EpochField()
    priority = serializers.IntegerField()
    max_attempts = serializers.IntegerField(allow_null=True)
    idempotency_key = serializers.CharField(allow_blank=True)


class DlqPage(serializers.Serializer):
    results = DlqEntry(many=True)
    next_cursor = serializers.CharField(allow_null=True)
    total = serializers.IntegerField(help_text="entries in the listed DLQ(s)")
    partial = serializers.BooleanField(help_text=PARTIAL_HELP)


class DlqDetail(serializers.Serializer):
    entry = DlqEntry()
    task = TaskDetail(allow_null=True, help_text="the task record; null once it expired")


class BulkResult(serializers.Serializer):
    queue = serializers.CharField()
    done = serializers.IntegerField()
    statuses = serializers.DictField(child=serializers.IntegerField())
    task_ids = serializers.ListField(
        child=serializers.CharField(), help_text="of this request: at most BULK_REQUEST_LIMIT"
    )
    more = serializers.BooleanField(help_text="stopped at the limit: matching entries may remain")
    next_cursor = serializers.CharField(allow_null=True, help_text="with more: pass as cursor")


class DlqPurgeResult(serializers.Serializer):
    queue = serializers.CharField()
    dry_run = serializers.BooleanField()
    entries = serializers.IntegerField(help_text="entries discarded (dry run: present now)")
    more = serializers.BooleanField(help_text="stopped at BULK_REQUEST_LIMIT: purge again")


class Worker(serializers.Serializer):
    id = serializers.CharField()
    host = serializers.CharField(allow_null=True)
    pid = serializers.IntegerField(allow_null=True)
    queues = serializers.ListField(child=serializers.CharField())
    concurrency = serializers.IntegerField()
    in_flight = serializers.IntegerField()
    stuck = serializers.IntegerField()
    processed = serializers.IntegerField()
    state = serializers.CharField()
    heartbeat = EpochField()
    heartbeat_age = serializers.FloatField()
    alive = serializers.BooleanField()


class WorkerList(serializers.Serializer):
    results = Worker(many=True)


class AuditEntry(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    actor = serializers.CharField(source="actor_name")
    source = serializers.CharField()
    action = serializers.CharField()
    queue = serializers.CharField(allow_blank=True)
    task_id = serializers.CharField(allow_blank=True)
    parameters = Json()
    affected = serializers.IntegerField()
    reason = serializers.CharField(allow_blank=True)
    request_id = serializers.CharField(allow_blank=True)
    client_address = serializers.CharField(allow_null=True)
    outcome = serializers.CharField()
    detail = serializers.CharField(allow_blank=True)


class AuditPage(serializers.Serializer):
    results = AuditEntry(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class Health(serializers.Serializer):
    status = serializers.CharField()


class Check(serializers.Serializer):
    ok = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)


class Ready(serializers.Serializer):
    ready = serializers.BooleanField()
    checks = serializers.DictField(child=Check())


class CatalogueTask(serializers.Serializer):
    """A registered task as the run-by-hand form lists it."""

    name = serializers.CharField()
    signature = serializers.CharField(help_text="its parameters, without the context")
    queues = serializers.ListField(child=serializers.CharField())


class Catalogue(serializers.Serializer):
    results = CatalogueTask(many=True)


class RunResult(serializers.Serializer):
    id = serializers.CharField()
    url = serializers.CharField()


class RunningTask(TaskSummary):
    running_for = serializers.FloatField(allow_null=True, default=None, help_text="seconds")


class WorkerDetail(serializers.Serializer):
    """One worker: its heartbeat, the tasks it runs now, the newest tasks it finished."""

    worker = Worker()
    running = RunningTask(many=True)
    history = TaskSummary(many=True)
    partial = serializers.BooleanField(help_text=PARTIAL_HELP)


class BulkJob(serializers.Serializer):
    id = serializers.CharField()
    action = serializers.CharField()
    state = serializers.CharField(help_text="planned, running or finished")
    query = serializers.CharField(help_text="the search query ('' for ticked rows)")
    count = serializers.IntegerField(help_text="tasks it touches: the dry run's count")
    done = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="changed state since the dry run: left alone")
    outcome = serializers.CharField(help_text="'ok', 'refused: ...' or 'error: ...' once finished")


class BulkPlan(serializers.Serializer):
    job = BulkJob()
    more = serializers.BooleanField(help_text="stopped at BULK_REQUEST_LIMIT: run it again after")
    skipped = serializers.DictField(
        child=serializers.IntegerField(), help_text="matching tasks left out, by why"
    )


WORKFLOW_STATES = ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
MEMBER_STATES = [*STATES, "WAITING"]


class WorkflowMember(serializers.Serializer):
    """One task of a workflow."""

    index = serializers.IntegerField()
    task_id = serializers.CharField()
    task = serializers.CharField(source="name")
    queue_name = serializers.CharField(source="queue")
    state = serializers.ChoiceField(
        MEMBER_STATES, help_text="the task's state; WAITING: not submitted yet (inputs missing)"
    )
    deps = serializers.ListField(
        child=serializers.IntegerField(), help_text="members that must finish before this one"
    )
    result = Json(allow_null=True)
    error = ObjectField(allow_null=True)


class WorkflowDetail(serializers.Serializer):
    """A chain, group or chord and its members, in compile order."""

    id = serializers.CharField()
    state = serializers.ChoiceField(WORKFLOW_STATES)
    on_failure = serializers.CharField(source="policy")
    label = serializers.CharField()
    total = serializers.IntegerField()
    done = serializers.IntegerField(help_text="members in a final state")
    failed = serializers.IntegerField(help_text="members whose final state is not SUCCEEDED")
    created_at = EpochField()
    updated_at = EpochField()
    result = Json(allow_null=True, help_text="the workflow's result once it SUCCEEDED")
    members = WorkflowMember(many=True)


class WorkflowActionResult(serializers.Serializer):
    """What a workflow action did."""

    workflow_id = serializers.CharField()
    outcome = serializers.CharField()


def workflow_detail(workflow: Any) -> dict[str, Any]:
    """Return a read-side Workflow as the API shows it (times in epoch seconds)."""
    return {
        "id": workflow.id,
        "state": workflow.state,
        "policy": workflow.policy,
        "label": workflow.label,
        "total": workflow.total,
        "done": workflow.done,
        "failed": workflow.failed,
        "created_at": workflow.created_at / 1000 if workflow.created_at else None,
        "updated_at": workflow.updated_at / 1000 if workflow.updated_at else None,
        "result": workflow.result,
        "members": workflow.members,
    }
