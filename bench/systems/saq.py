"""saq adapter: `saq settings --workers P`, concurrency C per process."""

from __future__ import annotations

import os

from systems.base import System


class Saq(System):
    """saq with default job options (timeout 10 s, retries 1)."""

    name = "saq"
    package = "saq"
    workload = "workloads.saq_app"
    config = "concurrency = C per process, --workers P, default job timeout 10 s / retries 1"
    at_least_once = ("no by default: a job of a dead worker is swept after its timeout and, "
                     "with the default retries=1, aborted; retries>1 re-runs it")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """One saq supervisor with `processes` worker processes."""
        return [[os.path.join(self.ctx.bin_dir, "saq"), f"{self.workload}.settings",
                 "--workers", str(processes), "--quiet"]]
