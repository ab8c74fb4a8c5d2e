"""arq adapter: one `arq` worker per process, max_jobs = concurrency."""

from __future__ import annotations

import os

from systems.base import System


class Arq(System):
    """arq with default polling (poll_delay 0.5 s) and keep_result (1 h)."""

    name = "arq"
    package = "arq"
    workload = "workloads.arq_app"
    config = ("max_jobs = C, one worker per process, defaults otherwise: each 0.5 s poll reads "
              "<=100 job ids (workers race for the same ids), keep_result 1 h")
    at_least_once = ("yes-ish: a job stays in the queue while running (in-progress key with "
                     "a TTL); if the worker dies it is re-run after that key expires")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent arq workers."""
        return [[os.path.join(self.ctx.bin_dir, "arq"), f"{self.workload}.WorkerSettings"]
                for _ in range(processes)]
