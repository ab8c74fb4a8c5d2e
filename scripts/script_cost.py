"""Measure Redis CPU per task of each hot script alone: submit, read, claim, finalize.

Starts a private redis-server on a free 127.0.0.1 port (never 6379); each round submits 400
no-op tasks one call each, reads them in batches, claims each batch and finalizes it as a
success, through the gateway, with the server's CPU (INFO cpu, user + sys) taken around each
phase. Prints the median and the lowest per-task figure of each phase over the rounds (the
lowest is the most robust on a shared machine). Run it on two commits alternately to compare.

    .venv/bin/python scripts/script_cost.py [--rounds 5] [--batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from redis_cost import private_redis, setup_in_process  # noqa: E402

PER_ROUND = 400


async def read_all(
    caller: Any, keys: Any, queues: list[str], worker: str, batch: int, n: int
) -> list[Any]:
    """Read up to n entries in read.lua batches of `batch`; return the batches."""
    from dtq.engine import gateway

    reads: list[Any] = []
    got = 0
    while got < n:
        entries, _ = await gateway.read(caller, keys, queues, worker, batch)
        if not entries:
            break
        reads.append(entries)
        got += len(entries)
    return reads


async def measure(port: int, rounds: int, batch: int) -> dict[str, list[float]]:
    """Run the rounds; return per-task CPU µs of each phase, one value per round."""
    import redis
    import redis.asyncio

    from dtq.conf import dtq_settings
    from dtq.engine import gateway
    from dtq.engine.direct import AsyncCaller
    from dtq.engine.executor import Outcome
    from dtq.engine.keys import Keys
    from dtq_project.demo.tasks import add

    sync = redis.Redis(port=port)

    def cpu() -> float:
        info = sync.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    caller = AsyncCaller(redis.asyncio.Redis(port=port, decode_responses=True))
    keys, queues, worker = Keys(dtq_settings.KEY_PREFIX, 0), ["demo"], "script-cost"
    phases: dict[str, list[float]] = {p: [] for p in ("submit", "read", "claim", "finalize")}

    def took(phase: str, since: float) -> None:
        phases[phase].append((cpu() - since) * 1e6 / PER_ROUND)

    for _ in range(rounds):
        start = cpu()
        for i in range(PER_ROUND):
            add.enqueue(i, 1)
        took("submit", start)
        start = cpu()
        reads = await read_all(caller, keys, queues, worker, batch, PER_ROUND)
        took("read", start)
        start = cpu()
        claims = [await gateway.claim(caller, keys, queues, e, worker, 60000) for e in reads]
        took("claim", start)
        start = cpu()
        for attempts in claims:
            done = [(att, Outcome("success", "2", '{"attempt":1}')) for att in attempts]
            await gateway.finalize(caller, keys, done, True, worker)
        took("finalize", start)
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8, help="entries per read/claim/finalize")
    opts = parser.parse_args()
    with private_redis("script-cost") as (client, work):
        port = int(client.connection_pool.connection_kwargs["port"])
        setup_in_process(port, "dtqscript", work)
        phases = asyncio.run(measure(port, opts.rounds, opts.batch))
        for phase, values in phases.items():
            print(
                f"{phase:<9} us/task median {statistics.median(values):6.1f}"
                f"  lowest {min(values):6.1f}"
            )
        total = sum(min(v) for v in phases.values())
        print(f"sum of lowest {total:.1f} us/task (batch {opts.batch})")


if __name__ == "__main__":
    main()
