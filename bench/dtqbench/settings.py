"""Django settings for the dtq benchmark: dtq + this app, in-memory SQLite, Redis from env."""

from __future__ import annotations

import os

SECRET_KEY = "dtq-bench-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "dtq",
    "dtqbench",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB", ":memory:"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DTQ = {
    "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"),
    "KEY_PREFIX": "dtqbench",
}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"handlers": [], "level": "WARNING"}}
