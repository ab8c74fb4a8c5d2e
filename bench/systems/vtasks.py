"""django-vtasks adapter: `manage.py runworker` on its Valkey backend, one per process."""

from __future__ import annotations

import os
import sys

from systems.base import System


class Vtasks(System):
    """django-vtasks 3 (a django.tasks backend) with the README's Valkey settings."""

    name = "django-vtasks"
    package = "django-vtasks"
    workload = "workloads.vtasks_app"
    config = ("ValkeyTaskBackend on redis-server (BROKER_URL; every other setting default: "
              "VTASKS_CONCURRENCY 20), async handler, `runworker` per process")
    bulk_api = "backend.enqueue_many (one LPUSH per queue)"
    at_least_once = ("no, by default: BLMOVE to a per-worker processing list, LREM after the "
                     "run; a dead worker's list is rescued on its host, but with "
                     "VTASKS_MAX_RESCUES=0 (default) its tasks go to the failed list instead "
                     "of running again. No retries, no stored results")

    def extra_env(self) -> dict[str, str]:
        """Point Django at the vtasks settings."""
        return {"DJANGO_SETTINGS_MODULE": "djpeers.vtasks"}

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent workers (vtasks has no multi-process mode of its own)."""
        return [[sys.executable, os.path.join(self.ctx.bench_dir, "manage.py"), "runworker"]
                for _ in range(processes)]
