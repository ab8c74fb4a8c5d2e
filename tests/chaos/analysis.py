"""Derived facts the invariants and the figures share: task metadata, re-executions and
their causes, recovery times, and the workers' return after each Redis restart."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tests.chaos.model import Execution, ProcessFault, RedisOutage, RunData

RETRY_OUTCOMES = ("retry", "error")  # the handler asked for (or allowed) another attempt
CLASS_OF_NAME = {
    "chaos.ordinary": "ordinary",
    "chaos.async": "async",
    "chaos.flaky": "flaky",
    "chaos.poison": "poison",
    "chaos.crasher": "crasher",
    "chaos.limited": "limited",
    "chaos.sleep": "slow",
    "chaos.async_sleep": "long",
    "chaos.gather": "wf_callback",
    "chaos.tick": "periodic",  # fired by the schedulers, not submitted by the load
    "chaos.cron_tick": "periodic",
}
SLACK = 0.05  # seconds: a process death is noticed by polling, up to this late
# Seconds before a primary kill whose writes the promoted replica may lack (replication is
# asynchronous; on loopback it lags well under a millisecond, this is generous).
REPLICATION_WINDOW = 1.0


def tasks(d: RunData) -> dict[str, dict[str, Any]]:
    """Return every task of the run: accepted ones, periodic firings, plus records no submit
    acknowledged."""
    out = {tid: dict(row) for tid, row in d.accepted.items()}
    for tid, rec in d.records.items():
        if tid not in out:
            cls = CLASS_OF_NAME.get(rec["name"], "?")
            out[tid] = {
                "id": tid,
                "cls": cls,
                "max_attempts": int(rec["max_attempts"]),
                "unacknowledged": cls != "periodic",
            }
    return out


def finished_at(rec: dict[str, Any] | None) -> float | None:
    """Return when a record reached its terminal state, in epoch seconds."""
    if not rec or not rec.get("finished_at"):
        return None
    return int(rec["finished_at"]) / 1000


@dataclass(slots=True)
class ReExecution:
    """A handler execution that followed one which had not asked for a retry."""

    task: str
    prev: Execution
    next: Execution
    cause: ProcessFault | None


def cause_of(d: RunData, prev: Execution, nxt: Execution) -> ProcessFault | None:
    """Return the kill, pause or death of prev's process between prev and nxt, if any, else
    the primary kill that explains the re-execution."""
    for fault in d.process_faults:
        if fault.pid == prev.pid and prev.start - SLACK <= fault.t <= nxt.start:
            return fault
    for kill in killed_primaries(d, prev.start - SLACK, nxt.start, prev.id):
        if outcome_lost(prev, kill) or (nxt.attempt == prev.attempt and claim_lost(prev, kill)):
            return ProcessFault(kill, "failover", prev.pid, "redis", "redis")
    return None


def killed_primaries(d: RunData, since: float, until: float, task_id: str) -> list[float]:
    """Return when the primary holding a task's shard was SIGKILLed (Cluster, Sentinel) between
    since and until."""
    shard = d.records.get(task_id, {}).get("shard")
    return [
        f.t
        for f in d.failovers
        if since <= f.t <= until and (f.shards is None or shard is None or shard in f.shards)
    ]


def outcome_lost(ex: Execution, kill: float) -> bool:
    """Whether ex's outcome may have reached only the killed primary: the handler ended in
    the replication window before the kill, so the promoted replica still had it RUNNING."""
    return ex.end is not None and kill - REPLICATION_WINDOW <= ex.end <= kill + SLACK


def claim_lost(ex: Execution, kill: float) -> bool:
    """Whether ex's claim may have reached only the killed primary: it started in the
    replication window before the kill, so the promoted replica delivers the attempt again."""
    return kill - REPLICATION_WINDOW <= ex.start <= kill + SLACK


def reexecutions(d: RunData) -> list[ReExecution]:
    """Return every execution that was not the planned next attempt after a retry."""
    out = []
    for task_id, runs in d.executions.items():
        for prev, nxt in pairwise(runs):
            if prev.outcome in RETRY_OUTCOMES and nxt.attempt > prev.attempt:
                continue
            out.append(ReExecution(task_id, prev, nxt, cause_of(d, prev, nxt)))
    return out


def _seconds(value: float | None) -> float:
    """Return a history timestamp in seconds (older records wrote milliseconds)."""
    value = float(value or 0)
    return value / 1000 if value > 1e11 else value


def worker_pid(worker_id: str) -> int | None:
    """Return the pid inside a worker id (host.pid.random; the host may contain dots)."""
    parts = worker_id.rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


@dataclass(slots=True)
class LostAttempt:
    """An attempt the reaper took back from its worker (history outcome 'lost')."""

    task: str
    attempt: int
    pid: int | None
    claimed: float
    reclaimed: float
    executed: bool  # the witness saw this attempt's handler start
    cause: ProcessFault | None


def lost_attempts(d: RunData) -> list[LostAttempt]:
    """Return every reclaimed attempt with the fault of its worker that explains it, if any."""
    out = []
    for tid, rec in d.records.items():
        ran = {ex.attempt for ex in d.executions.get(tid, [])}
        for h in rec.get("history") or []:
            if h.get("outcome") != "lost":
                continue
            pid = worker_pid(str(h.get("worker") or ""))
            start, end = _seconds(h.get("started_at")), _seconds(h.get("ended_at"))
            cause = next(
                (f for f in d.process_faults if f.pid == pid and _during(f, start, end)), None
            )
            if cause is None:
                cause = _failover_reclaim(d, tid, h["attempt"], pid, start, end)
            out.append(LostAttempt(tid, h["attempt"], pid, start, end, h["attempt"] in ran, cause))
    return out


def _during(fault: ProcessFault, start: float, end: float) -> bool:
    """Whether the fault struck the worker while the attempt was its: it began then, or it is
    a pause the claim fell into (Redis claims what a blocking read sent before the pause
    brings, on the paused worker's behalf)."""
    if start - SLACK <= fault.t <= end:
        return True
    return fault.kind == "pause" and fault.t <= start and (fault.until or end) >= start


def _failover_reclaim(
    d: RunData, tid: str, attempt: int, pid: int | None, start: float, end: float
) -> ProcessFault | None:
    """Return the primary kill that rolled this attempt back to RUNNING (its outcome lost)."""
    runs = [ex for ex in d.executions.get(tid, []) if ex.attempt == attempt and ex.pid == pid]
    for kill in killed_primaries(d, start - SLACK, end, tid):
        if any(outcome_lost(ex, kill) for ex in runs):
            return ProcessFault(kill, "failover", pid or 0, "redis", "redis")
    return None


def lost_set(d: RunData) -> set[tuple[str, int]]:
    """Return (task, attempt) of every attempt the reaper took back."""
    return {
        (tid, h["attempt"])
        for tid, rec in d.records.items()
        for h in rec.get("history") or []
        if h.get("outcome") == "lost"
    }


def in_flight(d: RunData, fault: ProcessFault, lost: set[tuple[str, int]]) -> list[Execution]:
    """Return the executions the fault cost: running when it hit, or finished with the outcome
    not yet recorded (the inherent window: the reaper had to take the attempt back)."""
    return [
        ex
        for runs in d.executions.values()
        for ex in runs
        if ex.pid == fault.pid
        and ex.start <= fault.t + SLACK
        and (ex.end is None or ex.end >= fault.t or (ex.id, ex.attempt) in lost)
    ]


@dataclass(slots=True)
class Recovery:
    """How long one execution caught by a fault took to run again (or to be settled)."""

    task: str
    fault: str
    at: float
    finished: bool  # the handler had finished; only its outcome was not recorded yet
    seconds: float
    rerun: bool  # False: the task was settled without another execution (DLQ, cancel)
    redis_restart: bool  # Redis restarted in between: nothing can be reclaimed while it is down


def recoveries(d: RunData) -> list[Recovery]:
    """Return the recovery of every execution in flight at a worker kill, pause or crash."""
    out, lost = [], lost_set(d)
    for fault in d.process_faults:
        if fault.role != "worker" or fault.kind not in ("kill", "pause", "crash"):
            continue
        for ex in in_flight(d, fault, lost):
            later = [e for e in d.executions[ex.id] if e.start > fault.t and e is not ex]
            done = finished_at(d.records.get(ex.id))
            if later:
                out.append(_recovery(d, ex, fault, later[0].start, True))
            elif done is not None and done > fault.t:
                out.append(_recovery(d, ex, fault, done, False))
    return out


def _recovery(
    d: RunData, ex: Execution, fault: ProcessFault, until: float, rerun: bool
) -> Recovery:
    restart = any(fault.t <= o.down <= until for o in d.outages)
    finished = ex.end is not None and ex.end < fault.t
    return Recovery(ex.id, fault.kind, fault.t, finished, until - fault.t, rerun, restart)


@dataclass(slots=True)
class Resumption:
    """Whether a worker that lived through a Redis restart ran tasks again, and how soon."""

    pid: int
    outage: int
    seconds: float | None  # None: no execution after the restart
    interrupted: bool  # killed or paused before it ran anything: its silence proves nothing


def _interruption(d: RunData, pid: int, since: float) -> float | None:
    """Return when a process was next killed, paused or ended after `since`, if it was."""
    times = [f.t for f in d.process_faults if f.pid == pid and f.t > since]
    exit_row = d.exits.get(pid)
    if exit_row is not None and not exit_row.get("final"):
        times.append(exit_row["t"])
    return min(times, default=None)


def interruptions(d: RunData) -> list[RedisOutage]:
    """Return the Redis restarts and the failovers (kill to promotion) of the run, in order."""
    failovers = [RedisOutage(f.t, "failover", f.promoted) for f in d.failovers]
    return sorted([*d.outages, *failovers], key=lambda o: o.down)


def resumptions(d: RunData) -> list[Resumption]:
    """Return, per Redis restart or failover, each worker process alive across it and its next
    execution (it must reconnect by itself, to the new primary after a failover)."""
    starts: dict[int, list[float]] = {}
    for runs in d.executions.values():
        for ex in runs:
            starts.setdefault(ex.pid, []).append(ex.start)
    out = []
    for n, outage in enumerate(interruptions(d)):
        if outage.up is None:
            continue
        for pid, spawn in d.spawns.items():
            exit_row = d.exits.get(pid)
            if spawn["role"] != "worker" or spawn["t"] > outage.down:
                continue
            if exit_row is not None and exit_row["t"] <= outage.up:
                continue
            cut = _interruption(d, pid, outage.down)
            after = [t for t in starts.get(pid, []) if outage.up < t <= (cut or float("inf"))]
            seconds = min(after) - outage.up if after else None
            out.append(Resumption(pid, n, seconds, cut is not None and not after))
    return out
