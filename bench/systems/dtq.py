"""dtq adapter: `python bench/manage.py dtq_worker` against bench/dtqbench/settings.py."""

from __future__ import annotations

import os
import sys

from systems.base import System


class Dtq(System):
    """dtq, the system under development."""

    name = "dtq"
    package = "dtq"
    workload = "workloads.dtq_app"
    config = ("dtq_worker --concurrency C --processes P, sync handler, "
              "Redis streams + Lua scripts")
    bulk_api = "Task.enqueue_many (pipelined, a script call per up to 100 tasks)"
    at_least_once = ("yes: XACK only after the task record holds its final state; dead "
                     "workers' entries are reclaimed via heartbeats/leases and XAUTOCLAIM")

    def extra_env(self) -> dict[str, str]:
        """Point Django at the bench settings."""
        return {"DJANGO_SETTINGS_MODULE": "dtqbench.settings"}

    def check(self) -> str | None:
        """None if dtq imports, exposes task() and ships the dtq_worker command."""
        probe = ("import django, dtq; django.setup(); assert hasattr(dtq, 'task'), "
                 "'dtq.task missing'; from django.core.management import get_commands; "
                 "assert 'dtq_worker' in get_commands(), 'no dtq_worker command'; "
                 "import workloads.dtq_app")
        rc, out = self._run([sys.executable, "-c", probe], 60, "check")
        return None if rc == 0 else (out.strip().splitlines() or ["import failed"])[-1]

    def worker_commands(self, processes: int) -> list[list[str]]:
        """One dtq_worker with `processes` processes of `concurrency` slots each."""
        # bench/manage.py rather than `python -m django`: dtq_worker --processes re-runs
        # sys.argv[0], which under -m is django/__main__.py (shadows the stdlib `http`).
        argv = [sys.executable, os.path.join(self.ctx.bench_dir, "manage.py"), "dtq_worker",
                "--queue", "bench",
                "--concurrency", str(self.ctx.concurrency)]
        if processes > 1:
            argv += ["--processes", str(processes)]
        return [argv]
