"""What both peer Django projects share: no database work, quiet logging, Redis from env."""

from __future__ import annotations

import os

SECRET_KEY = "dtq-bench-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS: list[str] = []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0")
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"handlers": [], "level": "WARNING"}}
