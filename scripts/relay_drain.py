"""Drain N tasks with one burst worker, on loopback and through the benchmark's delay relay.

Starts a private redis-server on a free 127.0.0.1 port (never 6379) and the bench's relay
(bench/benchlib/relay.py, which holds each client-to-server chunk --delay-ms) in front of it.
Each round and mode submits N no-op tasks in bulk, then drains them with one
`dtq_worker --burst` connected directly or through the relay, and prints: the rate over the
drain's span (first to last finish time in the queue's SUCCEEDED index, so the worker's
start-up does not count), the worker's CPU per task (its whole life, start-up included: about
0.8 s here), Redis' CPU per task, script calls per task and the relay process's CPU per task.
Run it on two checkouts alternately to compare (--root).

    .venv/bin/python scripts/relay_drain.py [-n 10000] [--rounds 2] [--concurrency 8]
        [--delay-ms 1] [--modes direct,relay] [--root PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

from benchlib.relay import Relay  # noqa: E402
from redis_cost import SCRIPT_CALLS, dtq_env, private_redis, snapshot, submit_all  # noqa: E402

PREFIX = "dtqdrain"


def process_cpu(pid: int) -> float:
    """Return the CPU seconds (user + sys) a live process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def relay_pid(relay: Relay) -> int:
    """Return the relay's Python process (procs.spawn may wrap it in coreutils' timeout)."""
    assert relay.proc is not None
    children = Path(f"/proc/{relay.proc.pid}/task/{relay.proc.pid}/children").read_text()
    return int(children.split()[0]) if children.strip() else relay.proc.pid


def drain(root: Path, env: dict[str, str], concurrency: int) -> float:
    """Run one burst worker of the checkout at root; return its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "dtq_worker",
            "--queue",
            "demo",
            "--burst",
            "--concurrency",
            str(concurrency),
            "-v",
            "0",
        ],
        env=env,
        cwd=root,
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10000, help="tasks per drain")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--modes", default="direct,relay")
    parser.add_argument("--root", type=Path, default=ROOT, help="the dtq checkout to run")
    opts = parser.parse_args()
    with private_redis("relay-drain") as (client, work):
        port = int(client.connection_pool.connection_kwargs["port"])
        relay = Relay(work, port, opts.delay_ms, lifetime=3600)
        relay.start()
        try:
            for _ in range(opts.rounds):
                for mode in opts.modes.split(","):
                    env = {**os.environ, **dtq_env(port, PREFIX, work)}
                    submit_all(opts.n, 500, env)
                    worker_port = relay.port if mode == "relay" else port
                    worker_env = {**env, "DTQ_REDIS_URL": f"redis://127.0.0.1:{worker_port}/0"}
                    since_ms = int(time.time() * 1000)
                    cpu0, cmds0 = snapshot(client)
                    relay0 = process_cpu(relay_pid(relay))
                    worker_cpu = drain(opts.root, worker_env, opts.concurrency)
                    cpu1, cmds1 = snapshot(client)
                    relay_cpu = process_cpu(relay_pid(relay)) - relay0
                    index = next(client.scan_iter(match=f"{PREFIX}*SUCCEEDED*"))
                    done = [
                        s for _, s in client.zrangebyscore(index, since_ms, "+inf", withscores=True)
                    ]
                    span = (max(done) - min(done)) / 1000 or 1e-3
                    calls = sum(
                        cmds1[c][0] - cmds0.get(c, (0, 0))[0] for c in SCRIPT_CALLS if c in cmds1
                    )
                    per_task = [x / opts.n * 1e6 for x in (worker_cpu, cpu1 - cpu0, relay_cpu)]
                    print(
                        f"{mode:6s} drain {len(done) / span:7.0f}/s  CPU us/task: worker "
                        f"{per_task[0]:6.1f}  Redis {per_task[1]:6.1f}  relay {per_task[2]:5.1f}"
                        f"  script calls/task {calls / opts.n:.3f}",
                        flush=True,
                    )
        finally:
            relay.stop()


if __name__ == "__main__":
    main()
