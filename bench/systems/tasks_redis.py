"""django-tasks-redis adapter: `manage.py run_redis_tasks --continuous`, one per process."""

from __future__ import annotations

import os
import sys

from systems.base import System


class TasksRedis(System):
    """django-tasks-redis (a django.tasks backend on Redis streams), README settings."""

    name = "django-tasks-redis"
    package = "django-tasks-redis"
    workload = "workloads.tasks_redis_app"
    config = ("RedisTaskBackend (README options), sync handler, one task at a time per "
              "`run_redis_tasks --continuous` process")
    at_least_once = ("yes: XACK after the result is written; a dead worker's entries are "
                     "XCLAIMed after REDIS_CLAIM_TIMEOUT (300 s), given up after "
                     "REDIS_MAX_DELIVERIES (5) starts")
    scale = 0.25  # one task at a time: about a tenth of the others' rate

    def extra_env(self) -> dict[str, str]:
        """Point Django at the django-tasks-redis settings."""
        return {"DJANGO_SETTINGS_MODULE": "djpeers.tasks_redis"}

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent workers."""
        return [[sys.executable, os.path.join(self.ctx.bench_dir, "manage.py"),
                 "run_redis_tasks", "--continuous"] for _ in range(processes)]
