"""Split an idle worker's enqueue-to-start latency into its legs, at a low fixed rate.

Starts a private redis-server on a free 127.0.0.1 port (never 6379), one dtq_worker of the
benchmark's project (bench/dtqbench and its no-op task, which notes when it starts) with two
timestamps added in its process, and the benchmark's producer at --rate tasks a second. Then
prints p50 / p90 / p99 (ms) of each leg:

- enqueue -> claimed: the producer's call, the submit, the served blocking read and the
  take.lua call behind it, up to the worker holding the take's decoded reply;
- claimed -> handed: until the runner hands the attempt to a pool thread;
- handed -> handler: until the handler's first line runs (the thread's wake-up, the GIL);
- in all;

and the script calls (FCALL, EVALSHA) Redis ran per task. Every process it starts is ended by
pid. It runs the dtq of its own checkout: copy it into another checkout's scripts/ to compare
two commits, alternating rounds (the machine's noise moves a leg by up to ±0.2 ms between
runs).

    .venv/bin/python scripts/idle_latency.py [-n 1000] [--rate 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
LOG_ENV = "IDLE_LATENCY_LOG"  # where the worker's process writes its timestamps


def instrumented_worker(argv: list[str]) -> None:
    """Run dtq_worker with a timestamp when a take's reply is decoded and at each hand-off."""
    sys.path.insert(0, str(BENCH))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtqbench.settings")
    import atexit

    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from dtq.engine import reader, runner

    marks: list[str] = []
    wait_and_take, begin = reader.Reader.wait_and_take, runner.Runner._begin

    async def timed_wait_and_take(self, watch, capacity):  # type: ignore[no-untyped-def]
        taken = await wait_and_take(self, watch, capacity)
        now = time.time()
        marks.extend(f"claimed {now:.6f} {att.id}" for att in taken.attempts)
        return taken

    def timed_begin(self, att):  # type: ignore[no-untyped-def]
        now = time.time()
        seq = json.loads(att.payload)["args"][0]
        marks.append(f"handed {now:.6f} {att.id} {seq}")
        return begin(self, att)

    reader.Reader.wait_and_take = timed_wait_and_take  # type: ignore[method-assign]
    runner.Runner._begin = timed_begin  # type: ignore[method-assign]
    atexit.register(lambda: Path(os.environ[LOG_ENV]).write_text("\n".join(marks) + "\n"))
    execute_from_command_line(["manage.py", "dtq_worker", *argv])


def percentiles(values: list[float]) -> str:
    """Return the p50, p90 and p99 of seconds, in ms, as one line."""
    ordered = sorted(values)
    n = len(ordered)
    at = [ordered[min(n - 1, int(n * q))] * 1000 for q in (0.5, 0.9, 0.99)]
    return "p50 {:.3f}  p90 {:.3f}  p99 {:.3f}".format(*at)


def legs(work: Path) -> dict[str, list[float]]:
    """Join the handler's records (seq enqueued started ...) with the worker's marks."""
    started = {}
    for path in (work / "out").glob("*.log"):
        for line in path.read_text().splitlines():
            seq, enqueued, start, _ = line.split()
            started[seq] = (float(enqueued), float(start))
    claimed, handed = {}, {}
    for line in (work / "marks.log").read_text().splitlines():
        kind, at, task_id, *seq = line.split()
        if kind == "claimed":
            claimed[task_id] = float(at)
        else:
            handed[seq[0]] = (task_id, float(at))
    out: dict[str, list[float]] = {"enqueue -> claimed": [], "claimed -> handed": []}
    out |= {"handed -> handler": [], "in all": []}
    for seq, (task_id, at) in handed.items():
        if seq not in started or task_id not in claimed:
            continue  # the first arrival's claim came by a take, not a blocking read
        enqueued, start = started[seq]
        out["enqueue -> claimed"].append(claimed[task_id] - enqueued)
        out["claimed -> handed"].append(at - claimed[task_id])
        out["handed -> handler"].append(start - at)
        out["in all"].append(start - enqueued)
    return out


def one_round(n: int, rate: float, concurrency: int) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from redis_cost import private_redis

    with private_redis("idle-latency") as (client, tmp):
        work, port = Path(tmp), client.connection_pool.connection_kwargs["port"]
        (work / "out").mkdir()
        env = os.environ | {
            "BENCH_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "BENCH_OUT": str(work / "out"),
            "DJANGO_SETTINGS_MODULE": "dtqbench.settings",
            LOG_ENV: str(work / "marks.log"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        argv = ["--queue", "bench", "--concurrency", str(concurrency), "-v", "0"]
        worker = subprocess.Popen(
            [sys.executable, __file__, "--worker", *argv], env=env, stdout=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 30
            while not client.keys("dtqbench:*:workers") and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)  # its first take is done and its read blocked
            client.config_resetstat()
            producer = [sys.executable, str(BENCH / "produce.py"), "--app", "workloads.dtq_app"]
            subprocess.run(
                [*producer, "--n", str(n), "--rate", str(rate)],
                env=env,
                check=True,
                timeout=n / rate + 120,
                stdout=subprocess.DEVNULL,
            )
            time.sleep(1)
            stats = client.info("commandstats")
            calls = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha"))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        for name, values in legs(work).items():
            print(f"  {name:<20} {percentiles(values)}  ({len(values)} tasks)")
        print(f"  script calls per task {calls / n:.2f}")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        instrumented_worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=1000, help="tasks per round")
    parser.add_argument("--rate", type=float, default=100.0, help="tasks a second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    opts = parser.parse_args()
    for i in range(opts.rounds):
        print(f"round {i + 1}: {opts.n} tasks at {opts.rate:g}/s")
        one_round(opts.n, opts.rate, opts.concurrency)


if __name__ == "__main__":
    main()
