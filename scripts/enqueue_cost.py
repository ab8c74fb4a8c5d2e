"""Measure enqueue one task per call against Task.enqueue_many, interleaved, in one process.

Starts a private redis-server on a free 127.0.0.1 port (never 6379) and alternates rounds of
N no-op tasks (the demo's `add`) enqueued one per call and N through `enqueue_many` (--bulk
tasks a call). Per phase: tasks/s (wall), client CPU µs per task (this process, user + sys,
so the socket calls count) and Redis CPU µs per task (INFO cpu). Prints the median of each
figure and of the per-round bulk/one ratio: on a shared machine the ratio within a round is
the robust figure. Run it on two commits alternately to compare.

--parts prints instead what one bulk call of --bulk tasks costs the client, part by part
(µs per task, the best of 40 repeats): the submissions, the checks and payloads before the
first write, the calls (ids, records, KEYS and ARGV) made while Redis runs the call before,
the decoding of replies, and the outcomes and result handles. The replies are ones Redis
gave for a real call of the same tasks.

    .venv/bin/python scripts/enqueue_cost.py [-n 5000] [--rounds 5] [--bulk 500] [--parts]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    parser.add_argument("--parts", action="store_true", help="a bulk call's client parts")
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
        if opts.parts:
            print_parts(add, opts.bulk)
            return
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


def print_parts(task: Any, size: int) -> None:
    """Print what each client part of one enqueue_many call of `size` tasks costs a task."""
    from dtq.engine import direct, gateway, submit
    from dtq.engine.connection import get_client
    from dtq.engine.scripts import script

    calls = [((i, 1), {}) for i in range(size)]
    subs = task._submissions(calls)
    units = submit._units(subs, {}, submit._chunks(size))
    sent = submit._Calls(units)
    replies = direct.call_script_many(get_client(), script("submit"), sent)
    answers = [gateway.submitted(reply) for reply in replies]

    def calls_built() -> None:
        built = submit._Calls(units)
        for i in range(len(built)):
            built[i]

    def outcomes() -> None:
        settled: list[Any] = [None] * size
        settle = submit._settler(subs, sent, settled)
        for i, answer in enumerate(answers):
            settle(i, answer)
        task._results(settled)

    parts: dict[str, Callable[[], Any]] = {
        "submissions (Task._submissions)": lambda: task._submissions(calls),
        "checks and payloads (submit._units)": lambda: submit._units(subs, {}, submit._chunks(size)),
        "calls, while Redis runs (submit._Calls)": calls_built,
        "replies decoded": lambda: [gateway.submitted(reply) for reply in replies],
        "outcomes and result handles": outcomes,
    }
    for name, part in parts.items():
        best = min(timeit.repeat(part, number=5, repeat=40)) / 5
        print(f"{name:<42} {best / size * 1e6:5.2f} us/task")


if __name__ == "__main__":
    main()
