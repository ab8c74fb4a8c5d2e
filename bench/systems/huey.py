"""Huey adapter: one huey_consumer (thread workers) per process."""

from __future__ import annotations

import os

from systems.base import System


class Huey(System):
    """Huey's RedisHuey with thread workers."""

    name = "huey"
    package = "huey"
    workload = "workloads.huey_app"
    config = "RedisHuey, huey_consumer -k thread -w C, one consumer per process"
    at_least_once = ("no: the consumer pops the message (BRPOP) before running it; "
                     "a crash loses the task")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent consumers."""
        return [[os.path.join(self.ctx.bin_dir, "huey_consumer"), f"{self.workload}.huey",
                 "-k", "thread", "-w", str(self.ctx.concurrency), "-q"]
                for _ in range(processes)]
