"""The figures of a run: what was submitted, what was done to the cluster, what it cost."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.chaos import analysis
from tests.chaos.model import RunData, percentile


def tasks_by_class(d: RunData) -> dict[str, dict[str, int]]:
    """Return, per class, how many tasks were accepted and how they ended."""
    out: dict[str, Counter[str]] = {}
    for tid, meta in analysis.tasks(d).items():
        rec = d.records.get(tid)
        row = out.setdefault(meta["cls"], Counter())
        row["tasks"] += 1
        row[rec["state"] if rec else "MISSING"] += 1
    return {cls: dict(row) for cls, row in sorted(out.items())}


def submissions(d: RunData) -> dict[str, int]:
    """Return the answers to every submit call (ok, duplicate, in_progress, error)."""
    rows = [r for r in d.submissions if r["kind"] == "submit"]
    counts = Counter(("resubmit " if r.get("resubmit") else "") + r["result"] for r in rows)
    dropped = sum(r.get("dropped", 0) for r in d.submissions if r["kind"] == "load_end")
    return {
        **dict(sorted(counts.items())),
        "not sent (driver blocked while Redis was down)": dropped,
    }


def faults(d: RunData) -> dict[str, dict[str, int]]:
    """Return planned, applied and skipped faults by kind, plus deaths we did not cause."""
    planned = Counter(f["kind"] for f in d.planned_faults)
    tried = Counter(r["fault"] for r in d.events if r["kind"] == "fault")
    skipped = Counter(r["fault"] for r in d.events if r["kind"] == "fault_skipped")
    out = {
        k: {
            "planned": n,
            "applied": tried[k] - skipped[k],
            "skipped (no target)": skipped[k],
        }
        for k, n in sorted(planned.items())
    }
    deaths = Counter(f.kind for f in d.process_faults if f.kind in ("crash", "exit"))
    if deaths["crash"]:
        out["worker self-kill (crasher task)"] = {"planned": 0, "applied": deaths["crash"]}
    if deaths["exit"]:
        out["other unexpected exit"] = {"planned": 0, "applied": deaths["exit"]}
    return out


def executions(d: RunData) -> dict[str, Any]:
    """Return execution counts, re-executions by cause, and the engine's own counters."""
    runs = [ex for group in d.executions.values() for ex in group]
    outcomes = Counter(ex.outcome or "killed mid-run" for ex in runs)
    redo = analysis.reexecutions(d)
    crasher = sum(1 for r in redo if r.prev.cls == "crasher")
    stats = d.snapshot.get("stats", {})
    stale_events = sum(
        1 for e in d.snapshot.get("events", []) if e[0] == "TASK_STALE_COMPLETION_REJECTED"
    )
    return {
        "executions": len(runs),
        "by outcome": dict(outcomes),
        "re-executions (duplicates executed)": len(redo),
        "  of which a crasher's own next attempt": crasher,
        "  of which caused by": dict(Counter(r.cause.kind for r in redo if r.cause)),
        "duplicate entries absorbed (stats.absorbed)": stats.get("absorbed", 0),
        "stale completions rejected (stats.stale)": stats.get("stale", 0),
        "stale-completion events": stale_events,
        "leases reclaimed (stats.reclaimed)": stats.get("reclaimed", 0),
        "attempts dropped unrun, lease gone (stats.start_skipped)": stats.get("start_skipped", 0),
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}s"


def recovery(d: RunData) -> dict[str, Any]:
    """Return recovery times from a worker kill/pause/crash to the task's next execution."""
    found = analysis.recoveries(d)
    out: dict[str, Any] = {
        "executions caught by a fault (attempts it cost)": len(found),
        "  of which the handler had finished, outcome not recorded yet": sum(
            r.finished for r in found
        ),
        "re-executed": sum(r.rerun for r in found),
        "settled without another run (DLQ, cancel)": sum(not r.rerun for r in found),
    }
    for label, restart in (("no Redis restart", False), ("Redis restarted", True)):
        times = [r.seconds for r in found if r.rerun and r.redis_restart == restart]
        quantiles = (percentile(times, 50), percentile(times, 95), max(times, default=None))
        out[f"recovery, {label} in between (n={len(times)})"] = "p50 {} / p95 {} / max {}".format(
            *(_fmt(v) for v in quantiles)
        )
    return out


def timing(d: RunData) -> dict[str, Any]:
    """Return drain time, Redis downtime and throughput during the faulted load phase."""
    load, end = d.phases.get("load"), d.phases.get("load_end")
    heal, drained = d.phases.get("heal"), d.phases.get("drained")
    out: dict[str, Any] = {"load phase": _fmt(end - load if load and end else None)}
    out["drain time"] = _fmt(drained - heal if heal and drained else None)
    downs = [o.up - o.down for o in d.outages if o.up]
    out["Redis restarts"] = len(d.outages)
    out["longest Redis outage"] = _fmt(max(downs) if downs else None)
    out["Redis outages longer than the lease"] = sum(1 for s in downs if s > d.config["lease"])
    if d.failovers:
        took = [f.promoted - f.t for f in d.failovers if f.promoted]
        out["primary kills (failovers)"] = len(d.failovers)
        out["slowest promotion of a replica"] = _fmt(max(took) if took else None)
    if load and end:
        done = [analysis.finished_at(r) for r in d.records.values()]
        finished = sum(1 for t in done if t is not None and load <= t <= end)
        starts = sum(1 for g in d.executions.values() for ex in g if load <= ex.start <= end)
        out["tasks finished per second under faults"] = round(finished / (end - load), 2)
        out["executions per second under faults"] = round(starts / (end - load), 2)
    return out


def all_figures(d: RunData) -> dict[str, Any]:
    """Return every figure group, in report order."""
    return {
        "Tasks by class (accepted, and how they ended)": tasks_by_class(d),
        "Submissions": submissions(d),
        "Faults": faults(d),
        "Executions and duplicates": executions(d),
        "Recovery (worker kill, pause or crash to re-execution)": recovery(d),
        "Timing": timing(d),
    }
