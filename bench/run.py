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
from dataclasses import replace
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

from benchlib import procs, report  # noqa: E402
from benchlib.phases import Pass, Plan  # noqa: E402
from benchlib.redis_server import RedisServer  # noqa: E402
from benchlib.relay import Relay  # noqa: E402
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
    ap.add_argument("--network", type=float, default=0.0, metavar="DELAY_MS",
                    help="also measure every system through a relay that holds each "
                    "client-to-server chunk DELAY_MS (about that much more per round trip)")
    ap.add_argument("--network-n", type=int, default=0,
                    help="pre-queued tasks per drain through the relay (default: --n)")
    ap.add_argument("--scaling", default="", metavar="LIST",
                    help="worker process counts of the scaling drains, e.g. 1,2,4 "
                    "(default: 1,2,4 in a full run, none in --smoke)")
    ap.add_argument("--no-bulk", action="store_true", help="skip the bulk enqueue phase")
    ap.add_argument("--tag", default="", help="results file name suffix: <date>-<tag>.md")
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
    if args.scaling:
        plan.scaling = tuple(int(p) for p in args.scaling.split(",") if p)
    elif not args.smoke:
        plan.scaling = (1, 2, 4)
    if args.no_bulk:
        plan.bulk = 0
    return plan


def network_plan(args: argparse.Namespace, plan: Plan) -> Plan:
    """The relay passes: enqueue, drains and latency at the lowest rate only.

    One enqueue per call is round-trip bound through the relay (well under 1,000/s), so the
    higher rates cannot be paced; io, bulk and scaling drains are loopback figures.
    """
    return replace(plan, n=args.network_n or plan.n, io=False, bulk=0, scaling=(),
                   rates=plan.rates[:1])


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


def measure(systems: list[System], server: RedisServer, plan: Plan, runs: int, budget: float,
            results: dict[str, list[dict[str, Any]]], notes: dict[str, list[str]]) -> int:
    """Run every system `runs` times, interleaved; returns the number of failed passes."""
    failures = 0
    started = time.monotonic()
    for r in range(runs):
        elapsed = time.monotonic() - started
        if r and elapsed / r * (r + 1) > budget:
            notes.setdefault("run", []).append(
                f"stopped after {r} run(s): the next would exceed --budget {budget:.0f}s")
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
    return failures


def rtt_ms(direct_url: str, relay_url: str, pings: int = 200) -> dict[str, float]:
    """Median PING round trip in ms, straight to the server and through the relay."""
    import redis

    out = {}
    for key, url in (("rtt_direct_ms", direct_url), ("rtt_relay_ms", relay_url)):
        client = redis.Redis.from_url(url, socket_timeout=5)
        client.ping()
        lat = []
        for _ in range(pings):
            t0 = time.perf_counter()
            client.ping()
            lat.append((time.perf_counter() - t0) * 1000.0)
        client.close()
        out[key] = sorted(lat)[len(lat) // 2]
    return out


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
    net_results: dict[str, list[dict[str, Any]]] = {}
    net_notes: dict[str, list[str]] = {}
    net_meta: dict[str, float] = {}
    systems: list[System] = []
    net_systems: list[System] = []
    skipped: dict[str, str] = {}
    try:
        server.start()
        print(f"redis-server {server.version()} on port {server.port} (run dir {run_dir})",
              flush=True)
        ctx = Ctx(bench_dir=BENCH_DIR, run_dir=run_dir, redis_url=server.url,
                  concurrency=args.concurrency, lifetime=300.0)
        systems, skipped = select_systems(args, ctx)
        failures += measure(systems, server, plan, runs, args.budget, results, notes)
        if args.network > 0:
            relay = Relay(run_dir, server.port, args.network, lifetime=args.budget * 2 + 300)
            relay.start()
            try:
                net_meta = {"delay_ms": args.network, **rtt_ms(server.url, relay.url)}
                print(f"relay on port {relay.port}: {net_meta}", flush=True)
                net_dir = os.path.join(run_dir, "relay")  # worker logs apart from loopback's
                os.makedirs(net_dir, exist_ok=True)
                net_ctx = replace(ctx, redis_url=relay.url, run_dir=net_dir)
                net_systems = [type(system)(net_ctx) for system in systems]
                failures += measure(net_systems, server, network_plan(args, plan), runs,
                                    args.budget, net_results, net_notes)
            finally:
                for system in net_systems:
                    system.stop()
                relay.stop()
        redis_version = server.version()
    finally:
        for system in systems:
            system.stop()
        server.stop()
        procs.kill_all()
    out_dir = args.out or os.path.join(BENCH_DIR, "results", "smoke" if args.smoke else "")
    meta = {"date": datetime.date.today().isoformat(), "runs": runs, "plan": plan,
            "concurrency": args.concurrency, "redis": redis_version, "smoke": args.smoke,
            "seconds": time.monotonic() - started, "python": sys.version.split()[0],
            "tag": args.tag}
    if net_results:
        meta["network"] = {**net_meta, "results": net_results, "notes": net_notes,
                           "n": network_plan(args, plan).n}
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
