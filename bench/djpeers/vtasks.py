"""django-vtasks on its Valkey backend (a Redis 7 server serves it: BLMOVE, BLMPOP, Lua)."""

from __future__ import annotations

from djpeers.common import *  # noqa: F403
from djpeers.common import REDIS_URL

INSTALLED_APPS = ["django.contrib.contenttypes", "django_vtasks"]
# The README's Valkey set-up: the backend with a BROKER_URL, every other setting at its
# default (VTASKS_CONCURRENCY 20 per worker process, queue "default", no rescues).
TASKS = {
    "default": {
        "BACKEND": "django_vtasks.backends.valkey.ValkeyTaskBackend",
        "OPTIONS": {"BROKER_URL": REDIS_URL},
    }
}
