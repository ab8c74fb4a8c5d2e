"""Settings for Django's tests/tasks/ run against DtqBackend (tests.django_suite)."""

import os

SECRET_KEY = "dtq-django-suite"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "dtq", "tasks"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DTQ = {
    "REDIS_URL": os.environ.get("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "KEY_PREFIX": os.environ["DTQ_KEY_PREFIX"],  # the runner picks one per run
    "TASK_MODULES": ["tasks.tasks"],  # Django's test tasks, as the package `tasks`
    "BLOCK_TIMEOUT": 0.2,
    "DEFAULT_MAX_ATTEMPTS": 1,  # Django's backends run a task once
}
TASKS = {"default": {"BACKEND": "tests.django_suite.backends.WorkerRunBackend", "QUEUES": []}}
# In the worker, django.tasks' log records go to stderr as JSON lines that the test process
# replays into its own django.tasks logger (backends.replay), where Django's tests look.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"relay": {"()": "tests.django_suite.backends.RelayFormatter"}},
    "handlers": {"relay": {"class": "logging.StreamHandler", "formatter": "relay"}},
    "loggers": {"django.tasks": {"handlers": ["relay"], "level": "DEBUG", "propagate": False}},
}
