"""django-tasks-redis with the README's configuration (Redis streams, consumer group)."""

from __future__ import annotations

from djpeers.common import *  # noqa: F403
from djpeers.common import REDIS_URL

INSTALLED_APPS = ["django.contrib.contenttypes", "django_tasks_redis"]
TASKS = {
    "default": {
        "BACKEND": "django_tasks_redis.RedisTaskBackend",
        "QUEUES": [],
        "OPTIONS": {
            "REDIS_URL": REDIS_URL,
            "REDIS_SOCKET_CONNECT_TIMEOUT": 5,
            "REDIS_HEALTH_CHECK_INTERVAL": 30,
        },
    }
}
