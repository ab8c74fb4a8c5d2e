"""Settings for dtq's test suite: real Redis from DTQ_REDIS_URL, fast timings."""

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

SECRET_KEY = "dtq-tests"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dtq",
    "tests.testapp",
]
# The admin pages and their live feed (tests/test_admin_*.py, tests/browser/): the browser
# tests serve dtq_project.asgi with these settings on 127.0.0.1.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
STATIC_URL = "static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DTQ_TEST_DB", str(Path(__file__).parent / "test.sqlite3")),
        "TEST": {"NAME": os.environ.get("DTQ_TEST_DB_TEST")},
    }
}
# DTQ_TEST_POSTGRES=postgresql://user[:password]@host:port/dbname runs the suite on PostgreSQL
# (tests/test_postgres.py does so for the audit tests); the test database gets a name of its
# own per process, so several runs can share one server.
if os.environ.get("DTQ_TEST_POSTGRES"):
    _pg = urlsplit(os.environ["DTQ_TEST_POSTGRES"])
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.path.lstrip("/") or "postgres",
        "USER": unquote(_pg.username or "postgres"),
        "PASSWORD": unquote(_pg.password or ""),
        "HOST": _pg.hostname or "127.0.0.1",
        "PORT": str(_pg.port or 5432),
        "TEST": {"NAME": f"dtq_test_{os.getpid()}"},
    }
DTQ = {
    "REDIS_URL": os.environ.get("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "REDIS_CLUSTER": os.environ.get("DTQ_REDIS_CLUSTER") == "1",  # make test-cluster
    "KEY_PREFIX": os.environ.get("DTQ_KEY_PREFIX", "dtqtest"),
    "SHARDS": int(os.environ.get("DTQ_TEST_SHARDS", "1")),  # make test-shards
    "HEARTBEAT_INTERVAL": 0.2,
    "LEASE_TIMEOUT": 1.5,
    "VISIBILITY_TIMEOUT": 4,
    "REAPER_INTERVAL": 0.2,
    "SCHEDULER_INTERVAL": 0.1,
    "BLOCK_TIMEOUT": 0.5,
    "RETRY_BASE": 0.05,
    "RETRY_CAP": 0.2,
}
# Worker processes started by a test get that test's setting changes through the environment.
DTQ.update(json.loads(os.environ.get("DTQ_TEST_OVERRIDES", "{}")))

# django.tasks on dtq (tests/test_backend*.py); its test tasks live in their own module.
TASKS = {"default": {"BACKEND": "dtq.backends.DtqBackend", "QUEUES": [], "OPTIONS": {}}}
DTQ.setdefault("TASK_MODULES", ["tests.testapp.django_tasks"])

# REST API (dtq.api, tests/test_api_*.py): DRF with token auth, drf-spectacular and its sidecar.
INSTALLED_APPS += [
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
]
