"""Celery 5 adapters: prefork pool and threads pool, acks_late, Redis broker."""

from __future__ import annotations

import os

from systems.base import System


class CeleryPrefork(System):
    """Celery prefork: one worker, --concurrency = number of processes."""

    name = "celery-prefork"
    package = "celery"
    workload = "workloads.celery_app"
    config = "prefork pool, -c = processes, acks_late=True, default prefetch (4), no results"
    at_least_once = ("yes-ish: acks_late; unacked messages return only after the Redis "
                     "visibility_timeout (1 h default); kombu restores them on a clean shutdown")

    def worker_commands(self, processes: int) -> list[list[str]]:
        """One celery worker whose prefork pool has `processes` children."""
        return [[os.path.join(self.ctx.bin_dir, "celery"), "-A", self.workload, "worker",
                 "-P", "prefork", "-c", str(processes), "-Q", "bench", "-l", "WARNING",
                 "-n", "prefork@%h"]]


class CeleryThreads(System):
    """Celery threads pool: one celery worker per process, each with N threads."""

    name = "celery-threads"
    package = "celery"
    workload = "workloads.celery_app"
    config = "threads pool, -c = concurrency per process, acks_late=True, no results"
    at_least_once = CeleryPrefork.at_least_once

    def worker_commands(self, processes: int) -> list[list[str]]:
        """`processes` independent celery workers with a threads pool each."""
        return [[os.path.join(self.ctx.bin_dir, "celery"), "-A", self.workload, "worker",
                 "-P", "threads", "-c", str(self.ctx.concurrency), "-Q", "bench",
                 "-l", "WARNING", "-n", f"threads{i}@%h"] for i in range(processes)]
