"""Django-version shims: django.tasks on Django 6.x, the django-tasks backport on Django 5.2.

dtq has one code path; every name that moved between the two lives here, so dtq's modules
(and the tests) import them from dtq.compat instead of from django.tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import django

HAS_DJANGO_TASKS = django.VERSION >= (6, 0)  # False: the backport package `django_tasks`
# Whether @task(**options) passes dtq's options to DtqTask (Django 6.1, the backport; not 6.0).
TASK_TAKES_OPTIONS = django.VERSION >= (6, 1) or not HAS_DJANGO_TASKS

# mypy checks the django.tasks branch (the one the pinned Django 6.1 has).
if TYPE_CHECKING or HAS_DJANGO_TASKS:
    from django import tasks
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.backends.dummy import DummyBackend
    from django.tasks.backends.immediate import ImmediateBackend
    from django.tasks.base import TASK_REFRESH_ATTRS, Task, TaskError, TaskResult
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # Django 5.2 LTS: the same API from the backport (requirements-django52.txt pins it)
    try:
        import django_tasks as tasks
    except ImportError as exc:
        raise ImportError(
            "dtq.backends on Django 5.2 needs the django-tasks backport: "
            "pip install 'dtq[django52]' (or use @dtq.task, which does not)"
        ) from exc
    from django_tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.backends.dummy import DummyBackend
    from django_tasks.backends.immediate import ImmediateBackend
    from django_tasks.base import TASK_REFRESH_ATTRS, Task, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

TASKS_MODULE = tasks.__name__  # "django.tasks" or "django_tasks": what user code imports

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "HAS_DJANGO_TASKS",
    "TASKS_MODULE",
    "TASK_REFRESH_ATTRS",
    "TASK_TAKES_OPTIONS",
    "BaseTaskBackend",
    "DummyBackend",
    "ImmediateBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "tasks",
]
