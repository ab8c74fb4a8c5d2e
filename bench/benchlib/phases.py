"""One measurement pass over one system: enqueue, drains, latency, commands, memory."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

from systems.base import System

from benchlib import procs
from benchlib.records import Records, drain_rate, latency_ms
from benchlib.redis_server import RedisServer

Metrics = dict[str, float | None]


@dataclass
class Plan:
    """Sizes and time bounds of one pass (full or smoke)."""

    n: int = 2000            # pre-queued no-op tasks per drain
    n_io: int = 1000         # pre-queued 1 ms tasks per drain
    cores: int = 2
    rates: tuple[tuple[int, float], ...] = ((100, 4.0), (1000, 2.0))  # (tasks/s, seconds)
    drain_timeout: float = 40.0
    settle: float = 0.3      # let late acks/finalizes reach Redis before reading stats
    bulk: int = 500          # tasks per bulk enqueue call (systems with a bulk API); 0: skip
    scaling: tuple[int, ...] = ()  # worker process counts of the scaling drains
    io: bool = True          # run the 1 ms-io drains


class Pass:
    """Runs the phases of one system in a fixed order and collects its metrics."""

    def __init__(self, system: System, server: RedisServer, plan: Plan) -> None:
        self.sys, self.server = system, server
        self.plan = replace(plan, n=max(20, int(plan.n * system.scale)),
                            n_io=max(10, int(plan.n_io * system.scale)))
        self.seq = 0
        self.m: Metrics = {}
        self.notes: list[str] = []
        self.incomplete = 0  # drains that did not finish: a broken system, not a slow one

    def _seqs(self, n: int) -> range:
        """A fresh range of task sequence numbers."""
        r = range(self.seq, self.seq + n)
        self.seq += n
        return r

    def _records(self) -> Records:
        assert self.sys.records is not None
        return self.sys.records

    def _drain(self, key: str, seqs: range) -> bool:
        """Wait for `seqs` to drain and store the steady-state rate under `key`."""
        ok = self.sys.wait_drained(seqs, self.plan.drain_timeout)
        recs = self._records().select(seqs)
        self.m[key] = drain_rate(recs)
        if not ok:
            self.incomplete += 1
            why = ("a worker process exited" if not procs.wait_alive(self.sys.workers)
                   else f"timed out after {self.plan.drain_timeout:.0f}s")
            self.notes.append(f"{key}: only {len(recs)}/{len(seqs)} done ({why})")
        return ok

    def run(self) -> Metrics:
        """All phases; every worker is stopped whatever happens."""
        try:
            self._noop_one_process()
            self._noop_all_cores_and_latency()
            if self.plan.io:
                self._io_drains()
            if self.plan.bulk and self.sys.bulk_api:
                self._bulk_enqueue()
            for processes in self.plan.scaling:
                self._scaling_drain(processes)
        finally:
            self.sys.stop()
        self.m["duplicates"] = float(self.sys.duplicates)
        self.m["load1"] = os.getloadavg()[0]  # other work on the machine skews everything
        return self.m

    def _noop_one_process(self) -> None:
        """(a) enqueue rate, (b) 1-process drain, (d) commands, (e) memory."""
        p, n = self.plan, self.plan.n
        seqs = self._seqs(n)
        s0 = self.server.snapshot()
        self.m["enqueue"] = self.sys.enqueue_many(seqs.start, n)["rate"]
        s1 = self.server.snapshot()
        self.sys.start_worker(1)
        self._drain("drain_1p", seqs)
        time.sleep(p.settle)
        s2 = self.server.snapshot()
        self.m["cmds_enqueue"] = (s1.calls - s0.calls) / n
        self.m["cmds_worker"] = (s2.calls - s1.calls) / n
        self.m["rtt_enqueue"] = (s1.reads - s0.reads - 1) / n
        self.m["rtt_worker"] = (s2.reads - s1.reads - 1) / n
        self.m["cmds_total"] = (s2.calls - s0.calls) / n
        self.m["rtt_total"] = (s2.reads - s0.reads - 2) / n
        # Redis runs commands on one core: its CPU per task caps the whole fleet.
        self.m["cpu_enqueue"] = (s1.cpu - s0.cpu) / n * 1e6
        self.m["cpu_worker"] = (s2.cpu - s1.cpu) / n * 1e6
        self.m["cpu_total"] = (s2.cpu - s0.cpu) / n * 1e6
        self.m["rss_1p"], self.m["pss_1p"] = procs.memory_mb(self.sys.worker_pids())
        self.sys.stop()

    def _noop_all_cores_and_latency(self) -> None:
        """(b) drain with one process per core, then (c) latency at fixed rates."""
        p = self.plan
        seqs = self._seqs(p.n)
        self.sys.enqueue_many(seqs.start, p.n)
        self.sys.start_worker(p.cores)
        if not self._drain("drain_np", seqs):
            return
        self.m["rss_np"], self.m["pss_np"] = procs.memory_mb(
            self.sys.worker_pids())
        warm = self._seqs(20)
        self.sys.enqueue_many(warm.start, len(warm))
        self.sys.wait_drained(warm, 10.0)
        for rate, seconds in p.rates:
            n = max(1, int(rate * seconds))
            seqs = self._seqs(n)
            got = self.sys.enqueue_many(seqs.start, n, rate=rate, timeout=seconds * 3 + 60)
            if got["rate"] < 0.9 * rate:
                self.notes.append(f"producer reached only {got['rate']:.0f}/s of {rate}/s")
            done = self.sys.wait_drained(seqs, max(10.0, seconds * 2))
            recs = self._records().select(seqs)
            p50, p99 = latency_ms(recs)
            if not done:
                self.notes.append(f"latency@{rate}/s: {len(recs)}/{n} handled in time")
                p99 = None
            self.m[f"lat{rate}_p50"], self.m[f"lat{rate}_p99"] = p50, p99
        self.sys.stop()

    def _io_drains(self) -> None:
        """(b') drains of pre-queued 1 ms-sleep tasks, one process then one per core."""
        p = self.plan
        for key, procs_n in (("io_1p", 1), ("io_np", p.cores)):
            seqs = self._seqs(p.n_io)
            self.sys.enqueue_many(seqs.start, p.n_io, kind="io")
            self.sys.start_worker(procs_n)
            self._drain(key, seqs)
            self.sys.stop()

    def _bulk_enqueue(self) -> None:
        """(a') enqueue through the system's public bulk call, then drain what it sent."""
        p = self.plan
        seqs = self._seqs(p.n)
        s0 = self.server.snapshot()
        self.m["enqueue_bulk"] = self.sys.enqueue_many(seqs.start, p.n, bulk=p.bulk)["rate"]
        s1 = self.server.snapshot()
        self.m["cpu_enqueue_bulk"] = (s1.cpu - s0.cpu) / p.n * 1e6
        self.sys.start_worker(1)
        self._drain("drain_bulk", seqs)  # what a bulk call accepted must run like the rest
        self.sys.stop()

    def _scaling_drain(self, processes: int) -> None:
        """(f) drain with `processes` worker processes; Redis CPU use while it drains."""
        seqs = self._seqs(self.plan.n)
        self.sys.enqueue_many(seqs.start, self.plan.n)
        s0 = self.server.snapshot()
        self.sys.start_worker(processes)
        ok = self._drain(f"scale{processes}", seqs)
        s1 = self.server.snapshot()
        self.sys.stop()
        rate = self.m.get(f"scale{processes}")
        if ok and rate:
            # Redis CPU per task while draining, at the steady-state rate: the share of one
            # core Redis needs for this throughput (start-up time does not dilute it).
            per_task = (s1.cpu - s0.cpu) / len(seqs)
            self.m[f"scale{processes}_redis_pct"] = rate * per_task * 100.0
