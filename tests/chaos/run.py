"""`make chaos`: run the fault-injection suite for one or more seeds and print each report.

    python -m tests.chaos.run --duration 300 --seed 7 --seed 8
    python -m tests.chaos.run --short --seeds 3        # three random seeds, CI-sized runs
    python -m tests.chaos.run --topology cluster       # on a local Cluster, with failovers
    python -m tests.chaos.run --shards 3               # the queue spread over three shards

Every run leaves its evidence in OUT/seed-N/ (re-check it offline with
`python -m tests.chaos.check OUT/seed-N`). Exit status 1 when any invariant fails.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def configure(values: dict[str, Any]) -> None:
    """Point this process's DTQ settings at the run's Redis and prefix."""
    from django.conf import settings

    from dtq.conf import dtq_settings
    from dtq.engine import connection

    settings.DTQ = {**settings.DTQ, **values}
    dtq_settings.reload()
    connection.reset()


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", help="seed to run (repeatable)")
    parser.add_argument("--seeds", type=int, default=1, help="random seeds to run if no --seed")
    parser.add_argument("--short", action="store_true", help="the CI-sized profile")
    parser.add_argument("--duration", type=float, help="seconds of load under faults")
    parser.add_argument("--rate", type=float, help="submissions per second")
    parser.add_argument("--appendfsync", choices=["always", "everysec"], help="Redis AOF fsync")
    parser.add_argument(
        "--topology",
        choices=["single", "cluster", "sentinel"],
        help="Redis: one server with AOF (default), a 3-primary Cluster, or Sentinel; the last "
        "two SIGKILL the primary (failover) and run with SUBMIT_REPLICAS=1",
    )
    parser.add_argument("--shards", type=int, help="DTQ SHARDS of the run's processes (default 1)")
    parser.add_argument("--redis-downtime", type=float, help="longest Redis outage (seconds)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "chaos", help="evidence dir")
    parser.add_argument("--keep", action="store_true", help="keep the evidence of passing runs")
    return parser.parse_args(argv)


def run_seed(seed: int, args: argparse.Namespace) -> bool:
    """Run one seed, print and save its report; return True when every invariant held."""
    from tests.chaos import config
    from tests.chaos.check import run_checks
    from tests.chaos.model import load
    from tests.chaos.report import render
    from tests.chaos.scenario import Run

    names = ("duration", "rate", "appendfsync", "redis_downtime", "topology", "shards")
    changes = {k: v for k in names if (v := getattr(args, k))}
    cfg = (config.short if args.short else config.full)(seed, **changes)
    run_dir = args.out / f"seed-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    where = f"on {cfg.topology} Redis, {cfg.shards} shard(s)"
    print(
        f"chaos: seed {seed}, {cfg.duration:.0f}s of load {where}, evidence in {run_dir}",
        flush=True,
    )
    started = time.monotonic()
    Run(cfg, run_dir, configure).execute()
    data = load(run_dir)
    checks = run_checks(data)
    text = render(data, checks)
    (run_dir / "report.md").write_text(text)
    print(text, flush=True)
    ok = all(c.ok for c in checks)
    print(f"chaos: seed {seed} {'PASSED' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
    if ok and not args.keep:
        shutil.rmtree(run_dir / "redis", ignore_errors=True)  # the AOF is the only big file
    return ok


def main(argv: list[str]) -> int:
    """Run the seeds; exit 1 if any of them broke an invariant."""
    args = parse(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    seeds = args.seed or [random.SystemRandom().randrange(1, 1_000_000) for _ in range(args.seeds)]
    failed = [seed for seed in seeds if not run_seed(seed, args)]
    if failed:
        print(f"chaos: FAILED seeds {failed} (replay with --seed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
