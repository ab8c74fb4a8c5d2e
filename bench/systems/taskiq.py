"""taskiq adapter: taskiq-redis stream broker, `taskiq worker --workers P`."""

from __future__ import annotations

import os

from systems.base import System


class Taskiq(System):
    """taskiq with RedisStreamBroker (falls back to ListQueueBroker on old taskiq-redis)."""

    name = "taskiq"
    package = "taskiq"
    workload = "workloads.taskiq_app"
    config = ("taskiq-redis RedisStreamBroker, --workers P, --max-async-tasks C, "
              "ack when_saved (default), no result backend")
    at_least_once = ("yes (stream broker): XACK after execution; pending entries of a dead "
                     "consumer are XAUTOCLAIMed after idle_timeout (10 min default)")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """One taskiq supervisor with `processes` worker children."""
        return [[os.path.join(self.ctx.bin_dir, "taskiq"), "worker",
                 f"{self.workload}:broker", "--workers", str(processes),
                 "--max-async-tasks", str(self.ctx.concurrency), "--log-level", "WARNING"]]
