"""The evidence of a run, loaded from its files and indexed for the checker (no Redis)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos import evidence

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "DEAD_LETTERED", "CANCELLED", "EXPIRED"})
TERMINAL_EVENTS = frozenset(
    {"TASK_SUCCEEDED", "TASK_FAILED", "TASK_DEAD_LETTERED", "TASK_CANCELLED", "TASK_EXPIRED"}
)


@dataclass(slots=True)
class Execution:
    """One handler execution seen by the witness: its start row and, if written, its end row."""

    id: str
    attempt: int
    pid: int
    start: float
    cls: str
    key: str = ""
    end: float | None = None
    outcome: str | None = None  # success | retry | error | cancelled; None: never ended


@dataclass(slots=True)
class ProcessFault:
    """Something that stopped a process: our SIGKILL or SIGSTOP, or a death we did not cause."""

    t: float
    kind: str  # kill | pause | crash | exit
    pid: int
    slot: str
    role: str
    until: float | None = None  # pause: when SIGCONT was sent


@dataclass(slots=True)
class RedisOutage:
    """A Redis restart: when it went down, how (SIGTERM or SIGKILL), and when it answered again."""

    down: float
    signal: str
    up: float | None = None


@dataclass(slots=True)
class Failover:
    """A SIGKILL of the primary (Cluster, Sentinel): when, and when its replica took over."""

    t: float
    promoted: float | None = None
    shards: list[int] | None = None  # the shards the killed primary held (None: every shard)


@dataclass
class RunData:
    """Everything the checker reads, with the indexes it needs."""

    config: dict[str, Any]
    prefix: str
    planned_faults: list[dict[str, Any]]
    events: list[dict[str, Any]]
    submissions: list[dict[str, Any]]
    cancels: list[dict[str, Any]]
    witness: list[dict[str, Any]]
    snapshot: dict[str, Any]
    freezes: list[dict[str, Any]] = field(default_factory=list)  # failpoint freezes
    executions: dict[str, list[Execution]] = field(default_factory=dict)
    process_faults: list[ProcessFault] = field(default_factory=list)
    outages: list[RedisOutage] = field(default_factory=list)
    failovers: list[Failover] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)
    spawns: dict[int, dict[str, Any]] = field(default_factory=dict)
    exits: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        return self.snapshot.get("records", {})


def load(run_dir: Path) -> RunData:
    """Read a run directory and build the indexes."""
    cfg = json.loads((run_dir / evidence.CONFIG).read_text())
    snap_path = run_dir / evidence.SNAPSHOT
    data = RunData(
        config=cfg["config"],
        prefix=cfg["prefix"],
        planned_faults=cfg["faults"],
        events=evidence.read_jsonl(run_dir / evidence.EVENTS),
        submissions=evidence.read_jsonl(run_dir / evidence.SUBMISSIONS),
        cancels=evidence.read_jsonl(run_dir / evidence.CANCELS),
        witness=evidence.read_witness(run_dir),
        snapshot=json.loads(snap_path.read_text()) if snap_path.exists() else {},
        freezes=evidence.read_jsonl(run_dir / evidence.FREEZES),
    )
    index(data)
    return data


def index(data: RunData) -> None:
    """Fill in the derived indexes of a RunData built from raw rows."""
    data.executions = executions(data.witness)
    data.process_faults, data.outages = process_faults(data.events), outages(data.events)
    data.failovers = failovers(data.events)
    for row in data.events:
        if row["kind"] == "phase":
            data.phases.setdefault(row["phase"], row["t"])
        elif row["kind"] == "spawn":
            data.spawns[row["pid"]] = row
        elif row["kind"] == "exit":
            data.exits.setdefault(row["pid"], row)
    data.process_faults = sorted(
        data.process_faults + frozen(data.freezes, data.spawns), key=lambda f: f.t
    )
    for row in data.submissions:
        if row["kind"] == "submit" and row.get("result") == "ok":
            data.accepted[row["id"]] = row


def executions(rows: list[dict[str, Any]]) -> dict[str, list[Execution]]:
    """Pair start and end rows by (task, attempt, pid); return executions per task by start."""
    open_runs: dict[tuple[str, int, int], list[Execution]] = defaultdict(list)
    by_task: dict[str, list[Execution]] = defaultdict(list)
    for row in rows:
        ident = (row["id"], row["attempt"], row["pid"])
        if row["ev"] == "start":
            ex = Execution(
                row["id"],
                row["attempt"],
                row["pid"],
                row["t"],
                row.get("cls", ""),
                row.get("key", ""),
            )
            open_runs[ident].append(ex)
            by_task[row["id"]].append(ex)
        elif open_runs.get(ident):
            ex = open_runs[ident].pop(0)
            ex.end, ex.outcome = row["t"], row["outcome"]
    for runs in by_task.values():
        runs.sort(key=lambda e: (e.start, e.attempt))
    return dict(by_task)


def process_faults(events: list[dict[str, Any]]) -> list[ProcessFault]:
    """Return the kills, pauses and unexpected deaths of role processes, oldest first."""
    faults: list[ProcessFault] = []
    paused: dict[int, ProcessFault] = {}
    for row in events:
        if row["kind"] == "signal" and not row.get("final"):
            sig = row["signal"]
            if sig == "SIGKILL":
                faults.append(ProcessFault(row["t"], "kill", row["pid"], row["slot"], row["role"]))
            elif sig == "SIGSTOP":
                fault = ProcessFault(row["t"], "pause", row["pid"], row["slot"], row["role"])
                faults.append(fault)
                paused[row["pid"]] = fault
            elif sig == "SIGCONT" and row["pid"] in paused:
                paused.pop(row["pid"]).until = row["t"]
        elif row["kind"] == "exit" and not row.get("by_us"):
            kind = "crash" if row.get("returncode") == -9 else "exit"
            faults.append(ProcessFault(row["t"], kind, row["pid"], row["slot"], row["role"]))
    return faults


def frozen(rows: list[dict[str, Any]], spawns: dict[int, dict[str, Any]]) -> list[ProcessFault]:
    """Return the freezes processes inflicted on themselves at a failpoint, as pauses."""
    out = []
    for row in rows:
        spawn = spawns.get(row["pid"], {})
        slot, role = spawn.get("slot", "?"), spawn.get("role", "worker")
        until = row["t"] + float(row["seconds"])
        out.append(ProcessFault(row["t"], "pause", row["pid"], slot, role, until=until))
    return out


def outages(events: list[dict[str, Any]]) -> list[RedisOutage]:
    """Return the Redis restarts of the run (the first start is not an outage)."""
    out: list[RedisOutage] = []
    for row in events:
        if row["kind"] == "redis_down":
            out.append(RedisOutage(row["t"], row["signal"]))
        elif row["kind"] == "redis_up" and out and out[-1].up is None:
            out[-1].up = row["t"]
    return out


def failovers(events: list[dict[str, Any]]) -> list[Failover]:
    """Return the primary kills of the run and when each replica was promoted."""
    out: list[Failover] = []
    for row in events:
        if row["kind"] == "primary_kill":
            out.append(Failover(row["t"], shards=row.get("shards")))
        elif row["kind"] == "promoted" and out and out[-1].promoted is None:
            out[-1].promoted = row["t"]
    return out


def percentile(values: list[float], q: float) -> float | None:
    """Return the q-th percentile (nearest rank) of values, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)) - 1, 0)
    return ordered[min(rank, len(ordered) - 1)]
