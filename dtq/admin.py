"""dtq in the Django admin: the queue dashboard pages, the read-only audit log, schedules."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from dtq.engine import audit_db
from dtq.engine.actions import AuditAction
from dtq.engine.audit import audited
from dtq.models import PERM_VIEW, AuditEntry, PeriodicSchedule, TaskQueue
from dtq.views import bulk, dlq, overview, periodic, queues, run, tasks, workers, workflows
from dtq.views.common import url_name

PAGES: list[tuple[str, Any, str]] = [
    ("live/", overview.overview_live, "overview_live"),
    ("tasks/", tasks.task_list, "tasks"),
    ("bulk/", bulk.bulk_plan, "bulk_plan"),
    ("bulk/<str:job_id>/", bulk.bulk_job, "bulk_job"),
    ("bulk/<str:job_id>/start/", bulk.bulk_start, "bulk_start"),
    ("bulk/<str:job_id>/progress/", bulk.bulk_job_json, "bulk_job_json"),
    ("tasks/<str:task_id>/", tasks.task_detail, "task"),
    ("tasks/<str:task_id>/live/", tasks.task_live, "task_live"),
    ("tasks/<str:task_id>/cancel/", tasks.task_cancel, "task_cancel"),
    ("tasks/<str:task_id>/edit/", run.task_edit, "task_edit"),
    ("run/", run.run_form, "run"),
    ("workflows/<str:workflow_id>/", workflows.workflow_page, "workflow"),
    ("workflows/<str:workflow_id>/live/", workflows.workflow_live, "workflow_live"),
    ("workflows/<str:workflow_id>/cancel/", workflows.workflow_cancel, "workflow_cancel"),
    ("workers/", workers.worker_list, "workers"),
    ("workers/<str:worker_id>/", workers.worker_page, "worker"),
    ("dlq/", dlq.dlq_list, "dlq"),
    ("dlq/action/", dlq.dlq_action, "dlq_action"),
    ("dlq/purge/", dlq.dlq_purge, "dlq_purge"),
    ("queues/<str:queue>/pause/", queues.queue_pause, "queue_pause"),
    ("queues/<str:queue>/resume/", queues.queue_resume, "queue_resume"),
    ("queues/<str:queue>/purge/", queues.queue_purge, "queue_purge"),
    ("queues/<str:queue>/limits/", queues.queue_limits, "queue_limits"),
]


@admin.register(TaskQueue)
class TaskQueueAdmin(admin.ModelAdmin):
    """The queue dashboard: a table-less model whose admin pages read Redis via the engine."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PERM_VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(PERM_VIEW)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        urls = [
            path(route, site.admin_view(partial(view, site=site)), name=url_name(name))
            for route, view, name in PAGES
        ]
        overview_view = site.admin_view(partial(overview.overview, site=site))
        return [*urls, path("", overview_view, name=url_name("changelist"))]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return overview.overview(request, site=self.admin_site)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Every operator action, read-only: who, what, target, count, reason, outcome."""

    list_display = (
        "created_at",
        "actor_name",
        "source",
        "action",
        "queue",
        "task_id",
        "affected",
        "outcome",
        "reason",
    )
    list_filter = ("action", "outcome", "source", "queue")
    search_fields = ("task_id", "queue", "actor_name", "reason")
    date_hierarchy = "created_at"
    list_select_related = ()
    show_full_result_count = False  # stays fast on a long log

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEntry]:
        return super().get_queryset(request).using(audit_db.read_alias())

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PeriodicSchedule)
class PeriodicScheduleAdmin(admin.ModelAdmin):
    """Database schedules: add and edit them (audited); the list shows code schedules too."""

    actions = None  # no unaudited bulk delete

    fieldsets = [
        (None, {"fields": ["name", "task", "args", "kwargs", "queue", "enabled", "description"]}),
        ("When", {"fields": ["cron", "every_seconds", "timezone"]}),
        ("Policies", {"fields": ["catch_up", "catch_up_window_seconds", "overlap"]}),
    ]

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        pages = [
            ("show/", periodic.schedule_show, "show"),
            ("action/", periodic.schedule_action, "action"),
        ]
        urls = [
            path(route, site.admin_view(partial(view, site=site)), name=f"dtq_periodicschedule_{n}")
            for route, view, n in pages
        ]
        return [*urls, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return periodic.schedule_list(request, site=self.admin_site)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PERM_VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(PERM_VIEW)

    # Django runs these views in one transaction; the audit row of a change is written on a
    # connection of its own (dtq.engine.audit), which SQLite would lock out meanwhile. One
    # row is saved or deleted, so the views run without the outer transaction.
    def changeform_view(self, request: HttpRequest, object_id: Any = None, *args: Any) -> Any:
        return self._changeform_view(request, object_id, *args)  # type: ignore[attr-defined]

    def delete_view(self, request: HttpRequest, object_id: Any, *args: Any) -> Any:
        return self._delete_view(request, object_id, *args)  # type: ignore[attr-defined]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        params = {"schedule": obj.name, "change": "changed" if change else "added"}
        params["fields"] = sorted(form.changed_data)
        with audited(
            periodic.actor(request), AuditAction.PERIODIC_EDIT, parameters=params
        ) as report:
            super().save_model(request, obj, form, change)
            report.affected = 1

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        params = {"schedule": obj.name, "change": "deleted"}
        with audited(
            periodic.actor(request), AuditAction.PERIODIC_EDIT, parameters=params
        ) as report:
            super().delete_model(request, obj)
            report.affected = 1
