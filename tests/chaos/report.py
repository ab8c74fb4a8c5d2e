"""Render a run's invariants and figures as Markdown (printed, and kept in report.md)."""

from __future__ import annotations

from typing import Any

from tests.chaos.check import Check
from tests.chaos.config import ChaosConfig
from tests.chaos.figures import all_figures
from tests.chaos.model import RunData


def _table(rows: dict[str, Any]) -> list[str]:
    if rows and all(isinstance(v, dict) for v in rows.values()):
        columns = sorted({c for v in rows.values() for c in v}, key=_column_order)
        lines = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for name, v in rows.items():
            lines.append(f"| {name} | " + " | ".join(str(v.get(c, "")) for c in columns) + " |")
        return lines
    lines = ["| | |", "|---|---|"]
    return lines + [f"| {k.strip()} | {v} |" for k, v in rows.items()]


def _column_order(name: str) -> tuple[int, str]:
    first = ["tasks", "planned", "applied", "SUCCEEDED", "DEAD_LETTERED", "CANCELLED"]
    return (first.index(name) if name in first else len(first), name)


def _topology(cfg: dict[str, Any]) -> str:
    topology, shards = cfg.get("topology", "single"), cfg.get("shards", 1)
    spread = f", the queue over {shards} shards" if shards > 1 else ""
    if topology == "single":
        return f"one server, AOF appendfsync {cfg['appendfsync']}{spread}"
    what = "a 3-primary Cluster" if topology == "cluster" else "a primary behind 3 Sentinels"
    return f"{what}, {cfg['replicas']} replicas per primary, SUBMIT_REPLICAS=1{spread}"


def render(d: RunData, checks: list[Check]) -> str:
    """Return the whole report."""
    cfg = d.config
    replay = ChaosConfig.from_dict(cfg).replay_command()
    passed = sum(c.ok for c in checks)
    lines = [
        f"# Chaos report: seed {cfg['seed']}",
        "",
        f"Redis {d.snapshot.get('redis_version', '?')} ({_topology(cfg)}); "
        f"{cfg['workers']} workers x {cfg['concurrency']}"
        f", {cfg['schedulers']} schedulers, {cfg['reapers']} reapers; {cfg['duration']:.0f}s of "
        f"load at {cfg['rate']}/s; heartbeat {cfg['heartbeat']}s, lease {cfg['lease']}s, "
        f"visibility {cfg['visibility']}s. Replay: `{replay}`.",
        "",
        f"## Invariants: {passed}/{len(checks)} hold",
        "",
        "| | invariant | result |",
        "|---|---|---|",
    ]
    for c in checks:
        lines.append(f"| {'PASS' if c.ok else '**FAIL**'} | {c.name} | {c.summary} |")
    for c in checks:
        if not c.ok:
            lines += ["", f"### {c.name}: counter-examples", ""]
            lines += [f"- {e}" for e in c.examples]
    for title, rows in all_figures(d).items():
        lines += ["", f"## {title}", "", *_table(rows)]
    return "\n".join(lines) + "\n"
