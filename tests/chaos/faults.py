"""The fault schedule: drawn from the seed up front (so a failing run replays), then applied
to the cluster at its planned times."""

from __future__ import annotations

import functools
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from tests.chaos.cluster import Cluster
from tests.chaos.config import ChaosConfig
from tests.chaos.evidence import JsonLog

KINDS = {  # kind: relative weight
    "worker_kill": 30,
    "worker_pause": 15,
    "worker_freeze": 8,  # a worker stopped between a claim and its handler's start
    "scheduler_kill": 10,
    "scheduler_kill_at_slot": 10,  # just before or after a whole second: periodic fire times
    "reaper_kill": 10,
    "redis_term": 6,
    "redis_kill": 6,
}
REDIS_RESTARTS = ("redis_term", "redis_kill")  # one server only
# Cluster and Sentinel: SIGKILL the primary of one of the run's shards (pick chooses which), its
# replica is promoted, and the old primary comes back (empty) as a replica later; it takes the
# place of the restarts.
FAILOVER = {"primary_kill": 12}


def kinds(cfg: ChaosConfig) -> dict[str, int]:
    """Return the fault kinds (and weights) of a run's topology."""
    if not cfg.replicated:
        return KINDS
    processes = {k: w for k, w in KINDS.items() if k not in REDIS_RESTARTS}
    return {**processes, **FAILOVER}


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned fault: what, when (seconds after the load starts), and its parameters."""

    at: float
    kind: str
    pick: float  # which healthy target, as a fraction of the candidates
    seconds: float  # pause or freeze length, Redis downtime, or delay before the restart
    count: int = 1  # reapers killed at once
    nth: int = 0  # worker_freeze: the handler start of the new process that freezes


def plan(cfg: ChaosConfig) -> list[Fault]:
    """Return the seeded fault schedule; every kind appears at least once."""
    rng = random.Random(cfg.seed)
    weights = kinds(cfg)
    first = list(weights)
    rng.shuffle(first)
    faults, t = [], 1.0
    end = cfg.duration - cfg.quiet_tail
    while t < end:
        kind = first.pop() if first else rng.choices(list(weights), list(weights.values()))[0]
        faults.append(_draw(rng, cfg, t, kind))
        t += rng.expovariate(1.0 / cfg.fault_every)
    return faults


def _draw(rng: random.Random, cfg: ChaosConfig, at: float, kind: str) -> Fault:
    pick = rng.random()
    if kind == "worker_pause":
        return Fault(round(at, 3), kind, pick, round(cfg.lease + rng.uniform(0.7, 2.5), 3))
    if kind == "worker_freeze":
        freeze = round(cfg.lease + rng.uniform(0.7, 2.5), 3)
        return Fault(round(at, 3), kind, pick, freeze, nth=rng.randint(1, 5))
    if kind.startswith("redis"):
        # Some outages outlast the lease: nobody can renew while Redis is down.
        long = rng.random() < cfg.long_outages
        down = cfg.lease + rng.uniform(0.5, 2.0) if long else rng.uniform(0.2, cfg.redis_downtime)
        return Fault(round(at, 3), kind, pick, round(down, 3))
    if kind == "primary_kill":  # seconds: until the old primary is restarted as a replica
        return Fault(round(at, 3), kind, pick, round(rng.uniform(0.5, 3.0), 3))
    count = 2 if kind == "reaper_kill" and rng.random() < 0.3 else 1
    return Fault(round(at, 3), kind, pick, round(rng.uniform(0.3, 1.5), 3), count)


class FaultRunner(threading.Thread):
    """Applies a schedule to a cluster; a target that is not healthy is skipped and logged."""

    def __init__(self, cluster: Cluster, faults: list[Fault], log: JsonLog, start: float):
        super().__init__(name="chaos-faults")
        self.cluster, self.faults, self.log, self.start_at = cluster, faults, log, start
        self.stop_event = threading.Event()
        self.error: BaseException | None = None  # re-raised by the driver after join()
        # A Redis restart or failover runs beside the schedule, one at a time.
        self._redis: threading.Thread | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            if self._redis is not None:
                self._redis.join()

    def _in_background(self, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:
            self.error = exc
            raise

    def _run(self) -> None:
        for index, fault in enumerate(self.faults):
            wait = self.start_at + fault.at - time.monotonic()
            if wait > 0 and self.stop_event.wait(wait):
                return
            details = asdict(fault)
            self.log.write("fault", index=index, fault=details.pop("kind"), **details)
            if not self.apply(fault):
                self.log.write("fault_skipped", index=index, fault=fault.kind)

    def apply(self, fault: Fault) -> bool:
        """Apply one fault now; return False when there was no healthy target."""
        c = self.cluster
        if fault.kind in (*REDIS_RESTARTS, *FAILOVER):
            if self._redis is not None and self._redis.is_alive():
                return False  # one Redis restart or failover at a time
            if fault.kind in FAILOVER:
                shard = int(fault.pick * c.cfg.shards)
                action = functools.partial(c.fail_over, fault.seconds, shard)
            else:
                sig = signal.SIGTERM if fault.kind == "redis_term" else signal.SIGKILL
                action = functools.partial(c.restart_redis, sig, fault.seconds)
            self._redis = threading.Thread(
                target=self._in_background, args=(action,), name="chaos-redis"
            )
            self._redis.start()
            return True
        role = fault.kind.split("_")[0]
        targets = c.healthy(role)
        if not targets:
            return False
        if fault.kind == "scheduler_kill_at_slot":
            # pick also sets the offset from the next whole second: -50..+50 ms
            time.sleep(max(0.0, 1 - time.time() % 1 + (fault.pick - 0.5) * 0.1))
        first = int(fault.pick * len(targets))
        count = min(fault.count, len(targets))
        chosen = [targets[(first + i) % len(targets)] for i in range(count)]
        if fault.kind == "worker_pause":
            return c.pause(chosen[0], fault.seconds) is not None
        if fault.kind == "worker_freeze":
            # SIGSTOP from outside cannot be timed between a claim and a handler start: replace
            # the worker by one whose failpoint freezes it right there (it logs the freeze).
            spec = f"worker.before_handler@{fault.nth}:freeze={fault.seconds}"
            return c.kill(chosen[0], 0.3, failpoints=spec) is not None
        return all(c.kill(slot, fault.seconds) is not None for slot in chosen)
