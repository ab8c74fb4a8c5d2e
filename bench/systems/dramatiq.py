"""Dramatiq adapter: Redis broker, --processes P --threads C."""

from __future__ import annotations

import os

from systems.base import System


class Dramatiq(System):
    """Dramatiq's own multi-process worker."""

    name = "dramatiq"
    package = "dramatiq"
    workload = "workloads.dramatiq_app"
    config = "RedisBroker, --processes P --threads C, default middleware"
    at_least_once = ("yes: messages are acked after the actor runs; a dead worker's "
                     "unacked messages are requeued by the broker's heartbeat maintenance")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """One dramatiq supervisor forking `processes` worker processes."""
        return [[os.path.join(self.ctx.bin_dir, "dramatiq"), self.workload, "--processes",
                 str(processes), "--threads", str(self.ctx.concurrency), "-Q", "bench",
                 "--worker-shutdown-timeout", "2000"]]
