"""URLs of the dtq API; include them under a prefix of your choice, e.g. ``path("api/", ...)``.

/metrics is served separately (Prometheus expects it at the root): route
``dtq.api.metrics.MetricsView`` yourself.
"""

from django.urls import path, re_path, register_converter

from dtq.api import errors, schema
from dtq.api.views import (
    bulk,
    bulk_actions,
    dlq,
    edit,
    periodic,
    queues,
    run,
    system,
    tasks,
    workers,
    workflows,
)
from dtq.engine.ids import ID_PATTERN


class TaskIdConverter:
    """Match a dtq task id in a path (anything else falls through to the 404 route)."""

    regex = ID_PATTERN.pattern.strip("^$")

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(TaskIdConverter, "dtq_task_id")
app_name = "dtq-api"
TASK_ID = "<dtq_task_id:task_id>"
WORKFLOW_ID = "<dtq_task_id:workflow_id>"  # workflow ids have the shape of task ids

urlpatterns = [
    path("tasks/", tasks.TaskCollection.as_view(), name="task-list"),
    path("tasks/bulk/", bulk.TaskBulkSubmit.as_view(), name="task-bulk"),
    path("tasks/catalogue/", run.TaskCatalogue.as_view(), name="task-catalogue"),
    path("tasks/run/", run.TaskRun.as_view(), name="task-run"),
    path(f"tasks/{TASK_ID}/", tasks.TaskDetailView.as_view(), name="task-detail"),
    path(f"tasks/{TASK_ID}/cancel/", tasks.TaskCancel.as_view(), name="task-cancel"),
    path(f"tasks/{TASK_ID}/retry/", edit.TaskRetry.as_view(), name="task-retry"),
    path("queues/", queues.QueueCollection.as_view(), name="queue-list"),
    path("queues/<str:name>/", queues.QueueDetailView.as_view(), name="queue-detail"),
    path("queues/<str:name>/pause/", queues.QueuePause.as_view(), name="queue-pause"),
    path("queues/<str:name>/resume/", queues.QueueResume.as_view(), name="queue-resume"),
    path("queues/<str:name>/limits/", queues.QueueLimitsView.as_view(), name="queue-limits"),
    path("queues/<str:name>/purge/", queues.QueuePurge.as_view(), name="queue-purge"),
    path("dlq/", dlq.DlqCollection.as_view(), name="dlq-list"),
    path("dlq/replay/", dlq.DlqBulkReplay.as_view(), name="dlq-replay-bulk"),
    path("dlq/purge/", dlq.DlqPurge.as_view(), name="dlq-purge"),
    path(f"dlq/{TASK_ID}/", dlq.DlqDetailView.as_view(), name="dlq-detail"),
    path(f"dlq/{TASK_ID}/replay/", dlq.DlqReplay.as_view(), name="dlq-replay"),
    path(f"dlq/{TASK_ID}/discard/", dlq.DlqDiscard.as_view(), name="dlq-discard"),
    path("schedules/", periodic.ScheduleCollection.as_view(), name="schedule-list"),
    path("schedules/<str:name>/", periodic.ScheduleDetail.as_view(), name="schedule-detail"),
    path("schedules/<str:name>/pause/", periodic.SchedulePause.as_view(), name="schedule-pause"),
    path("schedules/<str:name>/resume/", periodic.ScheduleResume.as_view(), name="schedule-resume"),
    path("schedules/<str:name>/run/", periodic.ScheduleRun.as_view(), name="schedule-run"),
    path(f"dlq/{TASK_ID}/edit/", edit.DlqEditReplay.as_view(), name="dlq-edit-replay"),
    *(
        path(f"bulk/{action}/{step}", view.as_view(), name=f"bulk-{action}-{name}")
        for action, (plan, start) in bulk_actions.VIEWS.items()
        for step, view, name in (("", plan, "plan"), ("start/", start, "start"))
    ),
    path("bulk/jobs/<str:job_id>/", bulk_actions.BulkJobDetail.as_view(), name="bulk-job"),
    path(f"workflows/{WORKFLOW_ID}/", workflows.WorkflowDetailView.as_view(), name="workflow"),
    path(
        f"workflows/{WORKFLOW_ID}/cancel/",
        workflows.WorkflowCancel.as_view(),
        name="workflow-cancel",
    ),
    path("workers/", system.WorkerCollection.as_view(), name="worker-list"),
    path("workers/<str:worker_id>/", workers.WorkerDetailView.as_view(), name="worker-detail"),
    path("audit/", system.AuditCollection.as_view(), name="audit-list"),
    path("health/", system.HealthView.as_view(), name="health"),
    path("ready/", system.ReadyView.as_view(), name="ready"),
    path("schema/", schema.SchemaView.as_view(), name="schema"),
    path("docs/", schema.DocsView.as_view(), name="docs"),
    # Anything else under the mount point answers 404 in the API's error shape ([\s\S]: a
    # newline in the path must not fall through to Django's HTML 404).
    re_path(r"^[\s\S]*$", errors.not_found),
]
