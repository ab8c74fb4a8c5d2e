"""The adapter interface: enqueue through a producer subprocess, run workers as subprocesses."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

from benchlib import procs
from benchlib.records import Records


@dataclass
class Ctx:
    """Everything an adapter needs to know about this run."""

    bench_dir: str
    run_dir: str
    redis_url: str
    concurrency: int
    lifetime: float = 600.0  # seconds any worker or producer may live, even if we are killed

    @property
    def bin_dir(self) -> str:
        """Directory of the venv's console scripts (celery, rq, ...)."""
        return os.path.dirname(sys.executable)


class System:
    """One queue system under test; subclasses set the ClassVars and worker_commands()."""

    name: ClassVar[str]
    package: ClassVar[str]
    workload: ClassVar[str]
    config: ClassVar[str]
    at_least_once: ClassVar[str]
    scale: ClassVar[float] = 1.0  # fraction of the plan's task counts (slow systems use less)
    bulk_api: ClassVar[str] = ""  # the public bulk enqueue call, if the system has one

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.workers: list[subprocess.Popen[bytes]] = []
        self.records: Records | None = None
        self._starts = 0
        self.duplicates = 0

    # -- to override -------------------------------------------------------------------------
    def worker_commands(self, processes: int) -> list[list[str]]:
        """argv of each worker process to launch for `processes` OS processes of work."""
        raise NotImplementedError

    def extra_env(self) -> dict[str, str]:
        """Additional environment for producer and workers."""
        return {}

    # -- shared behaviour --------------------------------------------------------------------
    def version(self) -> str:
        """Installed version of the system's distribution."""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def env(self, out_dir: str | None = None) -> dict[str, str]:
        """Environment for subprocesses: PYTHONPATH=bench/, Redis URL, output dir."""
        env = dict(os.environ)
        env.update(PYTHONPATH=self.ctx.bench_dir, BENCH_REDIS_URL=self.ctx.redis_url,
                   BENCH_CONCURRENCY=str(self.ctx.concurrency), PYTHONUNBUFFERED="1",
                   BENCH_OUT=out_dir or self.ctx.run_dir)
        env.update(self.extra_env())
        return env

    def _run(self, args: list[str], timeout: float, log_name: str) -> tuple[int, str]:
        """Run a helper subprocess to completion (killed after `timeout`); (rc, output)."""
        log_path = os.path.join(self.ctx.run_dir, f"{self.name}-{log_name}.log")
        with open(log_path, "wb") as log:
            proc = procs.spawn(args, env=self.env(), stdout=log, cwd=self.ctx.bench_dir,
                               lifetime=timeout + 10)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                procs.kill_group(proc, grace=1.0)
                rc = -9
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            return rc, fh.read()

    def check(self) -> str | None:
        """None if the workload module imports in a subprocess, else the reason it does not."""
        rc, out = self._run([sys.executable, "-c", f"import {self.workload}"], 60, "check")
        return None if rc == 0 else (out.strip().splitlines() or ["import failed"])[-1]

    def enqueue_many(self, seq0: int, n: int, kind: str = "noop", rate: float = 0.0,
                     timeout: float = 120.0, bulk: int = 0) -> dict[str, float]:
        """Enqueue tasks seq0..seq0+n-1 from one producer process; returns its JSON report.

        bulk > 0: through the system's public bulk call, `bulk` tasks per call (only for
        systems with `bulk_api`).
        """
        args = [sys.executable, os.path.join(self.ctx.bench_dir, "produce.py"), "--app",
                self.workload, "--seq0", str(seq0), "--n", str(n), "--kind", kind,
                "--rate", str(rate), "--bulk", str(bulk)]
        rc, out = self._run(args, timeout, "produce")
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if rc != 0 or not lines:
            raise RuntimeError(f"{self.name} producer failed (rc={rc}): {out[-800:]}")
        return dict(json.loads(lines[-1]))

    def start_worker(self, processes: int) -> None:
        """Launch the worker process(es) with a fresh output directory."""
        self._starts += 1
        out_dir = os.path.join(self.ctx.run_dir, f"{self.name}-w{self._starts}")
        os.makedirs(out_dir, exist_ok=True)
        self.records = Records(out_dir)
        for i, argv in enumerate(self.worker_commands(processes)):
            log = open(os.path.join(out_dir, f"worker{i}.out"), "wb")  # noqa: SIM115
            self.workers.append(procs.spawn(argv, env=self.env(out_dir), stdout=log,
                                            cwd=self.ctx.bench_dir, lifetime=self.ctx.lifetime))

    def wait_drained(self, seqs: range, timeout: float) -> bool:
        """Wait until every task of `seqs` was handled (False on timeout or dead workers)."""
        assert self.records is not None
        step = 1.0
        waited = 0.0
        while waited < timeout:
            if self.records.wait(seqs, min(step, timeout - waited)):
                return True
            waited += step
            if not procs.wait_alive(self.workers):
                return self.records.wait(seqs, 0.5)
        return False

    def worker_pids(self) -> list[int]:
        """Pids of the launched worker processes (their children are found via psutil)."""
        return [p.pid for p in self.workers]

    def worker_log_tail(self, chars: int = 1500) -> str:
        """End of the first worker's output, for error messages."""
        if self.records is None:
            return ""
        path = os.path.join(self.records.out_dir, "worker0.out")
        if not os.path.exists(path):
            return ""
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-chars:]

    def stop(self) -> None:
        """Kill every worker process group started by this adapter."""
        for proc in self.workers:
            procs.kill_group(proc)
        self.workers = []
        if self.records is not None:
            self.records.poll()
            self.duplicates += self.records.duplicates
            self.records.duplicates = 0
