"""One chaos run, start to finish: cluster up, load under the fault schedule, heal, drain,
snapshot, and every process ended. The checker then works from the files alone."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import redis

from dtq.engine import firing, shards
from tests.chaos import evidence, snapshot
from tests.chaos.cluster import Cluster
from tests.chaos.config import PERIODIC, ChaosConfig
from tests.chaos.faults import Fault, FaultRunner, plan
from tests.chaos.load import Load

STARTUP_TIMEOUT = 60.0
# A scheduler killed while holding a claim keeps its slot for the claim's lease: after the
# heal, wait that long (and a pass) before judging the periodic schedules.
PERIODIC_SETTLE = firing.CLAIM_LEASE_MS / 1000 + 2.0


def wait_until(condition: Callable[[], Any], timeout: float, interval: float = 0.1) -> bool:
    """Poll condition until truthy; return False on timeout (Redis errors count as not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except redis.RedisError:
            pass
        time.sleep(interval)
    return False


class Run:
    """Drives one run in run_dir; configure(values) points this process's DTQ settings."""

    def __init__(
        self, cfg: ChaosConfig, run_dir: Path, configure: Callable[[dict[str, Any]], None]
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.configure = configure
        self.prefix = f"chaos{uuid.uuid4().hex[:8]}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = evidence.JsonLog(run_dir / evidence.EVENTS)
        self.submissions = evidence.JsonLog(run_dir / evidence.SUBMISSIONS)
        self.cancels = evidence.JsonLog(run_dir / evidence.CANCELS)
        self.cluster = Cluster(cfg, run_dir, self.log, self.prefix)

    def execute(self) -> Path:
        """Run every phase; processes and Redis are stopped whatever happens."""
        faults = plan(self.cfg)
        self._write_config(faults)
        try:
            self._start()
            self._load(faults)
            self._drain()
            self._snapshot()
        finally:
            self.cluster.stop()
            for log in (self.log, self.submissions, self.cancels):
                log.close()
        return self.run_dir

    def _write_config(self, faults: list[Fault]) -> None:
        data = {
            "config": self.cfg.as_dict(),
            "prefix": self.prefix,
            "faults": [asdict(f) for f in faults],
        }
        (self.run_dir / evidence.CONFIG).write_text(json.dumps(data, indent=1))

    def _start(self) -> None:
        self.cluster.start_redis()
        redis_settings = self.cluster.redis.settings()
        self.configure({**redis_settings, "KEY_PREFIX": self.prefix, **self.cfg.dtq_settings()})
        self.cluster.start()
        home = shards.keys(shards.HOME, self.prefix)
        ready = wait_until(
            lambda: self._home().zcard(home.workers) >= self.cfg.workers, STARTUP_TIMEOUT
        )
        if not ready:
            raise RuntimeError(f"workers did not start within {STARTUP_TIMEOUT}s; see logs/")
        self.log.write("phase", phase="started")

    def _load(self, faults: list[Fault]) -> None:
        start = time.monotonic()
        self.log.write("phase", phase="load")
        runner = FaultRunner(self.cluster, faults, self.log, start)
        runner.start()
        stop = threading.Event()
        try:
            Load(self.cfg, self.submissions, self.cancels).run(start, stop)
        finally:
            runner.stop_event.set()
            runner.join()
        if runner.error is not None:
            raise RuntimeError("the fault runner failed") from runner.error
        self.log.write("phase", phase="load_end")

    def _drain(self) -> None:
        self.cluster.heal()
        self.log.write("phase", phase="heal")
        wait_until(self.cluster.all_running, 30.0)
        self._stop_schedules()
        done = wait_until(
            lambda: not any(snapshot.total(snapshot.leftovers(self.prefix)).values()),
            self.cfg.drain_timeout,
            interval=0.25,
        )
        self.log.write("phase", phase="drained" if done else "drain_timeout")

    def _home(self) -> redis.Redis:
        """Return this process's dtq client of HOME (it follows restarts and failovers)."""
        return shards.client(shards.HOME)

    def _stop_schedules(self) -> None:
        """Let the healed schedulers catch up, then pause the periodic schedules (kept in
        HOME) so the queue can drain; the checker expects every slot up to the pause fired
        exactly once."""
        time.sleep(PERIODIC_SETTLE)
        home, keys = self._home(), shards.keys(shards.HOME, self.prefix)
        seconds, micros = home.time()
        paused_ms = int(seconds) * 1000 + int(micros) // 1000
        for name in PERIODIC:
            home.hset(keys.periodic(name), "paused", "1")
        self.log.write("periodic_paused", redis_ms=paused_ms, settle=PERIODIC_SETTLE)

    def _snapshot(self) -> None:
        rows = evidence.read_jsonl(self.run_dir / evidence.SUBMISSIONS)
        idem_keys = sorted({r["key"] for r in rows if r.get("key")})
        data = snapshot.take(self.prefix, idem_keys)
        (self.run_dir / evidence.SNAPSHOT).write_text(json.dumps(data))
        self.log.write("phase", phase="snapshot")
