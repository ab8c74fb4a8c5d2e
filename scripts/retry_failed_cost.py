"""Measure what retry_failed.lua costs Redis: usec per task, one at a time and 100 per call.

Starts a private redis-server (scripts/redis_cost.py's), fails N tasks with the DLQ off
through the real scripts, retries them, then sends the batches again (the resend case), and
prints INFO commandstats' EVALSHA usec per call and per task for each.

    .venv/bin/python scripts/retry_failed_cost.py [-n 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.redis_cost import start_redis

BATCH = 100


def evalsha_usec(client: Any) -> tuple[int, int]:
    """Return (calls, usec) of EVALSHA since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(stats["calls"]), int(stats["usec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="tasks (half single, half batched)")
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as work:
        proc, client = start_redis(work)
        try:
            port = client.connection_pool.connection_kwargs["port"]
            os.environ.update(
                DJANGO_SETTINGS_MODULE="tests.settings",
                DTQ_REDIS_URL=f"redis://127.0.0.1:{port}/0",
                DTQ_KEY_PREFIX="retrycost",
            )
            measure(client, n)
        finally:
            proc.terminate()
            proc.wait()


def measure(client: Any, n: int) -> None:
    """Fail n tasks, retry half one by one and half in batches, then resend the batches."""
    import django

    django.setup()
    from dtq.engine import failed
    from tests.ops_support import fail_by_hand
    from tests.testapp import tasks

    ids = [tasks.record.enqueue(i).id for i in range(n)]
    for _ in range(0, n, 500):
        fail_by_hand(500)
    found = failed.find(ids)
    single, batched = found[: n // 2], found[n // 2 :]
    batches = [batched[i : i + BATCH] for i in range(0, len(batched), BATCH)]
    failed.retry("tests", single[:1])  # loads the script outside the counts
    runs = {
        "one task per call": lambda: [failed.retry("tests", [t]) for t in single[1:]],
        f"{BATCH} tasks per call": lambda: [failed.retry("tests", b) for b in batches],
        f"the same {BATCH} sent again": lambda: [failed.retry("tests", b) for b in batches],
    }
    for label, run in runs.items():
        client.config_resetstat()
        replies = [r for reply in run() for r in reply]
        assert set(replies) == {"retried"}, set(replies)
        calls, usec = evalsha_usec(client)
        print(f"{label}: {usec / calls:.0f} usec per call, {usec / len(replies):.1f} per task")


if __name__ == "__main__":
    main()
