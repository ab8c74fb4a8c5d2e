"""Measure enqueue one task per call against Task.enqueue_many, interleaved, in one process.

Starts a private redis-server on a free 127.0.0.1 port (never 6379) and alternates rounds of
N no-op tasks (the demo's `add`) enqueued one per call and N through `enqueue_many` (--bulk
tasks a call). Per phase: tasks/s (wall), client CPU µs per task (this process, user + sys,
so the socket calls count) and Redis CPU µs per task (INFO cpu). Prints the median of each
figure and of the per-round bulk/one ratio: on a shared machine the ratio within a round is
the robust figure. Run it on two commits alternately to compare.

    .venv/bin/python scripts/enqueue_cost.py [-n 5000] [--rounds 5] [--bulk 500]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from redis_cost import private_redis, setup_in_process  # noqa: E402

Phase = Callable[[int], None]


def measure(phase: Phase, n: int, server_cpu: Callable[[], float]) -> tuple[float, float, float]:
    """Run phase(n); return (tasks/s, client CPU µs per task, Redis CPU µs per task)."""
    redis0, client0, wall0 = server_cpu(), time.process_time(), time.perf_counter()
    phase(n)
    wall, client = time.perf_counter() - wall0, time.process_time() - client0
    return n / wall, client * 1e6 / n, (server_cpu() - redis0) * 1e6 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5000, help="tasks per phase and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bulk", type=int, default=500, help="tasks per enqueue_many call")
    opts = parser.parse_args()
    with private_redis("enqueue-cost") as (client, work):
        port = int(client.connection_pool.connection_kwargs["port"])
        setup_in_process(port, "dtqenqueue", work)
        from dtq_project.demo.tasks import add

        def server_cpu() -> float:
            info = client.info("cpu")
            return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

        def one(n: int) -> None:
            for i in range(n):
                add.enqueue(i, 1)

        def bulk(n: int) -> None:
            for start in range(0, n, opts.bulk):
                add.enqueue_many([((i, 1), {}) for i in range(start, min(n, start + opts.bulk))])

        one(200), bulk(opts.bulk)  # connections made, scripts loaded
        figures: dict[str, list[tuple[float, float, float]]] = {"one": [], "bulk": []}
        for _ in range(opts.rounds):
            for name, phase in (("one", one), ("bulk", bulk)):
                figures[name].append(measure(phase, opts.n, server_cpu))
            client.flushdb()  # the private server's own database
        for name, runs in figures.items():
            rate, cpu, redis_cpu = (statistics.median(r[i] for r in runs) for i in range(3))
            print(
                f"{name:<5} {rate:9,.0f} tasks/s  client CPU {cpu:6.1f} us/task  "
                f"Redis CPU {redis_cpu:6.1f} us/task"
            )
        ratios = [b[0] / o[0] for o, b in zip(figures["one"], figures["bulk"], strict=True)]
        shown = ", ".join(f"{r:.1f}" for r in ratios)
        print(f"bulk/one {statistics.median(ratios):.2f}x (per round: {shown})")


if __name__ == "__main__":
    main()
