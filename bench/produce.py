"""Producer subprocess: enqueue N tasks (as fast as possible, at a fixed rate, or in bulk calls),
print JSON."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import time
from typing import Any


def _pace(t0: float, i: int, rate: float) -> float:
    """Seconds to wait before task i for a fixed `rate` (0 means no pacing)."""
    return t0 + i / rate - time.perf_counter() if rate > 0 else 0.0


def _batches(seq0: int, n: int, size: int) -> list[range]:
    """Consecutive ranges of at most `size` sequence numbers covering seq0..seq0+n-1."""
    return [range(s, min(s + size, seq0 + n)) for s in range(seq0, seq0 + n, size)]


def run_sync(mod: Any, seq0: int, n: int, kind: str, rate: float, bulk: int = 0) -> float:
    """Enqueue with a sync producer; returns the elapsed seconds of the enqueue loop."""
    prod = mod.make_producer()
    if hasattr(prod, "start"):
        prod.start()
    t0 = time.perf_counter()
    if bulk:
        for batch in _batches(seq0, n, bulk):
            ts = time.time()
            prod.enqueue_bulk([(seq, ts, kind) for seq in batch])
    for i in range(0 if bulk else n):
        wait = _pace(t0, i, rate)
        if wait > 0:
            time.sleep(wait)
        prod.enqueue(seq0 + i, time.time(), kind)
    elapsed = time.perf_counter() - t0
    prod.close()
    return elapsed


async def run_async(mod: Any, seq0: int, n: int, kind: str, rate: float, bulk: int = 0) -> float:
    """Enqueue with an async producer; returns the elapsed seconds of the enqueue loop."""
    prod = mod.make_producer()
    await prod.start()
    t0 = time.perf_counter()
    if bulk:
        for batch in _batches(seq0, n, bulk):
            ts = time.time()
            await prod.enqueue_bulk([(seq, ts, kind) for seq in batch])
    for i in range(0 if bulk else n):
        wait = _pace(t0, i, rate)
        if wait > 0:
            await asyncio.sleep(wait)
        await prod.enqueue(seq0 + i, time.time(), kind)
    elapsed = time.perf_counter() - t0
    await prod.close()
    return elapsed


def main() -> None:
    """Parse args, import the workload module, enqueue, print {'n', 'elapsed', 'rate'}."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", required=True)
    ap.add_argument("--seq0", type=int, default=0)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--kind", default="noop", choices=["noop", "io"])
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--bulk", type=int, default=0, help="tasks per bulk enqueue call (0: one)")
    args = ap.parse_args()
    mod = importlib.import_module(args.app)
    if mod.ASYNC:
        elapsed = asyncio.run(run_async(mod, args.seq0, args.n, args.kind, args.rate, args.bulk))
    else:
        elapsed = run_sync(mod, args.seq0, args.n, args.kind, args.rate, args.bulk)
    rate = args.n / elapsed if elapsed > 0 else 0.0
    print(json.dumps({"n": args.n, "elapsed": elapsed, "rate": rate}))


if __name__ == "__main__":
    main()
