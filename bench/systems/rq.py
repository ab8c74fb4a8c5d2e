"""RQ adapter: default `rq worker` (fork per job), one worker per process."""

from __future__ import annotations

import os

from systems.base import System


class Rq(System):
    """RQ with its default Worker class."""

    name = "rq"
    package = "rq"
    workload = "workloads.rq_app"
    scale = 0.25  # a fork per job makes it ~100 tasks/s; keeps a full run within budget
    config = "default Worker (forks a work horse per job), 1 job at a time per worker"
    at_least_once = ("no by default: a job whose worker dies is found in the started registry "
                     "and moved to failed (AbandonedJobError); re-run only if Retry is set")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent `rq worker` processes."""
        return [[os.path.join(self.ctx.bin_dir, "rq"), "worker", "bench", "--url",
                 self.ctx.redis_url, "-q", "-n", f"bench{i}-{os.getpid()}"]
                for i in range(processes)]
