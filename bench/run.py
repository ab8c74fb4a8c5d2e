"""dtq benchmark entry point: bench/.venv/bin/python bench/run.py [--smoke] [--runs N]."""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

from benchlib import procs, report  # noqa: E402
from benchlib.phases import Pass, Plan  # noqa: E402
from benchlib.redis_server import RedisServer  # noqa: E402
from systems import ALL, Ctx, System  # noqa: E402

SMOKE_SYSTEMS = ["dtq", "huey", "rq"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3, help="passes per system (median is reported)")
    ap.add_argument("--smoke", action="store_true", help="tiny N, 1 run, few systems, seconds")
    ap.add_argument("--systems", default="", help=f"comma list from: {','.join(ALL)}")
    ap.add_argument("--concurrency", type=int, default=8, help="threads/async slots per process")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2,
                    help="processes for the 'one per core' figures")
    ap.add_argument("--n", type=int, default=0, help="pre-queued no-op tasks per drain")
    ap.add_argument("--budget", type=float, default=840.0, help="seconds; later runs are skipped")
    ap.add_argument("--out", default="", help="results directory (default bench/results[/smoke])")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                    help="first wait up to this long for the 1-min load to drop below cores/2")
    return ap.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    """Full or smoke sizes."""
    if args.smoke:
        plan = Plan(n=200, n_io=100, cores=args.cores, rates=((100, 0.5), (1000, 0.3)),
                    drain_timeout=20.0)
    else:
        plan = Plan(cores=args.cores)
    if args.n:
        plan.n = args.n
    return plan


def select_systems(args: argparse.Namespace, ctx: Ctx) -> tuple[list[System], dict[str, str]]:
    """Instantiate the requested adapters; those that do not import are skipped with a reason."""
    default = SMOKE_SYSTEMS if args.smoke else list(ALL)
    names = [s for s in args.systems.split(",") if s] or default
    chosen: list[System] = []
    skipped: dict[str, str] = {}
    for name in names:
        if name not in ALL:
            raise SystemExit(f"unknown system {name!r}; choose from {', '.join(ALL)}")
        system = ALL[name](ctx)
        reason = system.check()
        if reason:
            skipped[name] = reason
            print(f"SKIP {name}: {reason}", flush=True)
        else:
            chosen.append(system)
    return chosen, skipped


def wait_idle(limit: float, cores: int) -> None:
    """Sleep (bounded by `limit` seconds) until the machine's 1-min load is below cores/2."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= cores / 2 and time.monotonic() < deadline:
        print(f"waiting for an idle machine: load {os.getloadavg()[0]:.1f}", flush=True)
        time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))


def main(argv: list[str] | None = None) -> int:
    """Start a private Redis, measure every system `runs` times, write the report."""
    args = parse_args(argv)
    runs = 1 if args.smoke else max(1, args.runs)
    plan = make_plan(args)
    if args.wait_idle > 0:
        wait_idle(args.wait_idle, args.cores)
    run_dir = tempfile.mkdtemp(prefix="dtqbench-")
    atexit.register(procs.kill_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = RedisServer(run_dir, lifetime=args.budget * 2 + 300)
    failures = 0
    started = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, list[str]] = {}
    systems: list[System] = []
    skipped: dict[str, str] = {}
    try:
        server.start()
        print(f"redis-server {server.version()} on port {server.port} (run dir {run_dir})",
              flush=True)
        ctx = Ctx(bench_dir=BENCH_DIR, run_dir=run_dir, redis_url=server.url,
                  concurrency=args.concurrency, lifetime=300.0)
        systems, skipped = select_systems(args, ctx)
        for r in range(runs):
            elapsed = time.monotonic() - started
            if r and elapsed / r * (r + 1) > args.budget:
                notes.setdefault("run", []).append(
                    f"stopped after {r} run(s): the next would exceed --budget {args.budget:.0f}s")
                break
            for system in systems:
                server.flush()
                t0 = time.monotonic()
                p = Pass(system, server, plan)
                try:
                    metrics = p.run()
                    failures += p.incomplete > 0
                except Exception as exc:  # keep going with the other systems
                    failures += 1
                    system.stop()
                    metrics = dict(p.m)
                    p.notes.append(f"failed: {exc}".splitlines()[0][:300])
                    traceback.print_exc()
                    print(system.worker_log_tail(), file=sys.stderr)
                results.setdefault(system.name, []).append(metrics)
                notes.setdefault(system.name, []).extend(f"run {r + 1}: {n}" for n in p.notes)
                print(f"run {r + 1}/{runs} {system.name:15s} {time.monotonic() - t0:5.1f}s "
                      + json.dumps({k: round(v, 3) if v is not None else None
                                    for k, v in metrics.items()}), flush=True)
        redis_version = server.version()
    finally:
        for system in systems:
            system.stop()
        server.stop()
        procs.kill_all()
    out_dir = args.out or os.path.join(BENCH_DIR, "results", "smoke" if args.smoke else "")
    meta = {"date": datetime.date.today().isoformat(), "runs": runs, "plan": plan,
            "concurrency": args.concurrency, "redis": redis_version, "smoke": args.smoke,
            "seconds": time.monotonic() - started, "python": sys.version.split()[0]}
    md, png = report.write(out_dir, meta, systems, skipped, results, notes)
    print(f"wrote {md} and {png} in {meta['seconds']:.0f}s", flush=True)
    if failures:
        print(f"{failures} pass(es) failed; see the Notes section of {md} and the worker logs "
              f"in {run_dir}", file=sys.stderr)
        return 1
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
