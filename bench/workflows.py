"""Workflow costs: enqueue time of a big group or chord, and Redis CPU of the fan-in per member.

Starts a private redis-server (never 6379, like scripts/redis_cost.py), then for N members:
  plain   N independent tasks (submit_many), drained by one `dtq_worker --burst`
  group   dtq.group of N, enqueued as one workflow, drained the same way
  chord   dtq.chord(group of N, total.s()), the same plus the callback
and prints enqueue wall time, round trips to Redis (commands seen by the server, a MULTI
counted once), Redis CPU per member (INFO cpu, user + sys) and the difference to plain:
the fan-in overhead per member.

    .venv/bin/python bench/workflows.py [-n 10000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from redis_cost import PREFIX, delta, drain, snapshot, start_redis  # noqa: E402

ENQUEUE = {
    "plain": (
        "from dtq.engine.submit import Submission, submit_many\n"
        "subs = [Submission(name=add.name, queue='demo', args=(j, 1)) for j in range(n)]\n"
        "t = time.perf_counter()\n"
        "for i in range(0, n, 500): submit_many(subs[i:i + 500])\n"
    ),
    "group": (
        "g = dtq.group(add.s(j, 1) for j in range(n))\nt = time.perf_counter()\ng.enqueue()\n"
    ),
    "chord": (
        "g = dtq.chord(dtq.group(add.s(j, 1) for j in range(n)), total.s())\n"
        "t = time.perf_counter()\n"
        "wf = g.enqueue()\n"
    ),
}


def enqueue(kind: str, n: int, env: dict[str, str]) -> float:
    """Enqueue one workload from a child process; return its wall time (build excluded)."""
    code = (
        "import time, django; django.setup()\n"
        "import dtq\n"
        "from dtq_project.demo.tasks import add, total\n"
        f"n = {n}\n" + ENQUEUE[kind] + "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    opts = parser.parse_args()
    n = opts.n
    work = tempfile.mkdtemp(prefix="dtq-wf-")
    proc, client = start_redis(work)
    try:
        port = client.connection_pool.connection_kwargs["port"]
        env = dict(
            os.environ,
            DTQ_REDIS_URL=f"redis://127.0.0.1:{port}/0",
            DTQ_KEY_PREFIX=PREFIX,
            DTQ_VAR_DIR=work,
            DJANGO_SETTINGS_MODULE="dtq_project.settings",
        )
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], env=env, cwd=ROOT, check=True
        )
        plain_cpu = 0.0
        for kind in ("plain", "group", "chord"):
            cpu0, c0 = snapshot(client)
            wall = enqueue(kind, n, env)
            cpu1, c1 = snapshot(client)
            wall_drain = drain(env, opts.concurrency)
            cpu2, c2 = snapshot(client)
            drained = delta(c1, c2)
            sent = delta(c0, c1)
            calls = sum(c for k, (c, _) in sent.items() if k in ("evalsha", "multi", "exec"))
            calls += (
                sum(c for k, (c, _) in sent.items() if k not in ("evalsha", "multi", "exec"))
                if kind == "plain"
                else 0
            )
            per_member = (cpu2 - cpu0) * 1e6 / n
            if kind == "plain":
                plain_cpu = per_member
            extra = "" if kind == "plain" else f", fan-in overhead {per_member - plain_cpu:+.1f} us"
            print(
                f"{kind:<6} N={n}: enqueue {wall * 1000:,.0f} ms ({n / wall:,.0f} members/s), "
                f"drain {wall_drain:.1f} s; Redis CPU enqueue {(cpu1 - cpu0) * 1e6 / n:.1f} + "
                f"drain {(cpu2 - cpu1) * 1e6 / n:.1f} = {per_member:.1f} us/member{extra}"
            )
            print(
                "       enqueue commands: "
                + ", ".join(f"{k} {c}" for k, (c, _) in sorted(sent.items()) if c)
            )
            top = sorted(drained.items(), key=lambda kv: -kv[1][1])[:8]
            print(
                "       drain usec/member by command: "
                + ", ".join(f"{k} {u / n:.1f}" for k, (_, u) in top)
            )
            left = client.xlen(f"{PREFIX}:{{0}}:q:demo:1")
            if left:
                print(f"       WARNING: {left} entries left in the stream")
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
