"""Measure what a task costs Redis: INFO cpu and commandstats over submit + drain.

Starts a private redis-server on a free 127.0.0.1 port (never 6379), submits N no-op tasks
one call each, drains them with one real `dtq_worker --burst` process, and prints Redis CPU
(user + sys) per task, commands per task, and usec per call of each command and script.

    .venv/bin/python scripts/redis_cost.py [-n 20000] [--concurrency 8] [--bulk 0]
        [--queue-concurrency N] [--queue-rate 100000/s]

--queue-concurrency / --queue-rate set a limit on the demo queue before the drain: with a
limit above what the worker runs at once, nothing waits and the figures are the cost of the
check itself (docs/flow-control.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "dtqcost"
SCRIPT_CALLS = ("evalsha", "eval", "fcall")  # the calls of a script, not commands inside one


def free_port() -> int:
    """Return an unused loopback port other than 6379."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


def start_redis(work: str) -> tuple[subprocess.Popen[bytes], redis.Redis]:
    """Start a non-persistent redis-server and wait for PING."""
    port = free_port()
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    proc = subprocess.Popen(
        [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            work,
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, decode_responses=True)
    wait_until_up(proc, client, seconds=5, what="redis-server")
    return proc, client


def wait_until_up(
    proc: subprocess.Popen[bytes], client: redis.Redis, seconds: float, what: str
) -> None:
    """Wait for the server to answer PING; kill it and raise when it does not in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not start")


@contextlib.contextmanager
def private_redis(name: str) -> Iterator[tuple[redis.Redis, str]]:
    """Run a private redis-server in a new temporary directory; yield (client, directory)."""
    work = tempfile.mkdtemp(prefix=f"dtq-{name}-")
    proc, client = start_redis(work)
    try:
        yield client, work
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def dtq_env(port: int, prefix: str, work: str) -> dict[str, str]:
    """Return the environment variables that point dtq at a private server."""
    return {
        "DTQ_REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "DTQ_KEY_PREFIX": prefix,
        "DTQ_VAR_DIR": work,
        "DJANGO_SETTINGS_MODULE": "dtq_project.settings",
    }


def setup_in_process(port: int, prefix: str, work: str) -> None:
    """Point this process's dtq at a private server and set Django up."""
    os.environ.update(dtq_env(port, prefix, work))
    import django

    django.setup()


def snapshot(client: redis.Redis) -> tuple[float, dict[str, tuple[int, int]]]:
    """Return (cpu seconds user + sys, {command: (calls, usec)})."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    cmds = {k[8:]: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), cmds


def script_names() -> dict[str, str]:
    """Map each script's SHA (EVALSHA) and its function's name (FCALL) to the script's name."""
    sys.path.insert(0, str(ROOT))
    from dtq.engine import scripts

    functions = scripts.library().functions
    names = {scripts.script(n).sha: n for n in scripts.NAMES}
    return {**names, **{functions[sha]: n for sha, n in names.items() if sha in functions}}


def per_script(client: redis.Redis, n: int) -> None:
    """Print usec per call and per task of each script, from a SLOWLOG that logs every call."""
    names = script_names()
    calls: dict[str, list[int]] = {}
    entries = client.slowlog_get(-1)
    print(f"  slowlog entries {len(entries)}")
    for entry in entries:
        cmd = entry["command"].decode(errors="replace").split()
        if cmd and cmd[0].lower() in SCRIPT_CALLS:
            name = names.get(cmd[1], cmd[1][:8])
            calls.setdefault(name, []).append(int(entry["duration"]))
    for name, times in sorted(calls.items()):
        times.sort()
        print(
            f"  {name:<10} calls {len(times):6d}  usec/call mean {sum(times) / len(times):7.1f}"
            f" p50 {times[len(times) // 2]:5d}  usec/task {sum(times) / n:6.2f}"
        )


def submit_all(n: int, bulk: int, env: dict[str, str]) -> float:
    """Submit n tasks from a child process; return its wall time."""
    code = (
        "import time, django; django.setup()\n"
        "from dtq_project.demo.tasks import add\n"
        "from dtq.engine.submit import Submission, submit_many\n"
        f"n, bulk = {n}, {bulk}\n"
        "t = time.perf_counter()\n"
        "if bulk:\n"
        "    for i in range(0, n, bulk):\n"
        "        submit_many([Submission(name=add.name, queue='demo', args=(j, 1))"
        " for j in range(i, min(n, i + bulk))])\n"
        "else:\n"
        "    for i in range(n): add.enqueue(i, 1)\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def drain(env: dict[str, str], concurrency: int) -> float:
    """Drain the queue with one dtq_worker --burst process; return its wall time."""
    t = time.perf_counter()
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
        cwd=ROOT,
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t


def delta(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Return {command: (calls, usec)} grown between snapshots a and b."""
    out = {}
    for k, (calls, usec) in b.items():
        c0, u0 = a.get(k, (0, 0))
        if calls > c0 and k.split("|")[0] not in ("info", "ping", "hello", "client", "config"):
            out[k] = (calls - c0, usec - u0)
    return out


def report(phase: str, n: int, cpu: float, cmds: dict[str, Any]) -> None:
    """Print one phase's figures."""
    inner = sum(c for k, (c, _) in cmds.items() if k not in SCRIPT_CALLS)
    print(
        f"{phase}: Redis CPU {cpu * 1e6 / n:.1f} us/task, commands in scripts {inner / n:.2f}/task"
    )
    for k, (calls, usec) in sorted(cmds.items(), key=lambda kv: -kv[1][1]):
        print(
            f"  {k:<14} calls/task {calls / n:6.3f}  usec/call {usec / calls:7.2f}  "
            f"usec/task {usec / n:6.2f}"
        )


def set_limits(client: redis.Redis, concurrency: int, rate: str) -> None:
    """Write the demo queue's limits hash as ops.set_queue_limits would."""
    sys.path.insert(0, str(ROOT))
    from dtq.engine.limits import parse_rate

    key = f"{PREFIX}:{{0}}:lim:demo"
    if concurrency:
        client.hset(key, "max_concurrency", concurrency)
    if rate:
        client.hset(key, "rate", parse_rate(rate).encoded())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--bulk", type=int, default=0, help="submit_many batch size (0: one)")
    parser.add_argument("--queue-concurrency", type=int, default=0, help="queue limit (0: none)")
    parser.add_argument("--queue-rate", default="", help="queue rate limit, e.g. 100000/s")
    parser.add_argument(
        "--per-script",
        action="store_true",
        help="also time each script call (SLOWLOG of every command: adds CPU"
        " and memory, use -n 5000 or less)",
    )
    opts = parser.parse_args()
    with private_redis("cost") as (client, work):
        port = client.connection_pool.connection_kwargs["port"]
        env = {**os.environ, **dtq_env(port, PREFIX, work)}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], env=env, cwd=ROOT, check=True
        )
        if opts.per_script:
            client.config_set("slowlog-log-slower-than", 0)
            client.config_set("slowlog-max-len", 60 * opts.n + 1000)  # inner commands too
        cpu0, c0 = snapshot(client)
        wall_submit = submit_all(opts.n, opts.bulk, env)
        set_limits(client, opts.queue_concurrency, opts.queue_rate)
        cpu1, c1 = snapshot(client)
        wall_drain = drain(env, opts.concurrency)
        cpu2, c2 = snapshot(client)
        n = opts.n
        left = client.xlen(f"{PREFIX}:{{0}}:q:demo:1")
        print(
            f"N={n} submit {n / wall_submit:,.0f}/s drain {n / wall_drain:,.0f}/s "
            f"(incl. start-up) entries left {left}"
        )
        report("submit", n, cpu1 - cpu0, delta(c0, c1))
        report("drain", n, cpu2 - cpu1, delta(c1, c2))
        if opts.per_script:
            per_script(client, n)
        print(f"TOTAL Redis CPU {(cpu2 - cpu0) * 1e6 / n:.1f} us/task")


if __name__ == "__main__":
    main()
