"""Count the Redis commands the read side sends for one queue, at each shard count given.

Submits tasks spread over the shards under a private key prefix on DTQ_REDIS_URL, runs each
read inside a read budget and prints the commands it spent (docs/scaling.md), then deletes
its keys.

    DTQ_REDIS_URL=redis://127.0.0.1:6379/0 PYTHONPATH=. .venv/bin/python \\
        scripts/shard_read_cost.py [--shards 1 3] [-n 60]
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable
from typing import Any

import django
import redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.test import override_settings  # noqa: E402

from dtq.engine import ids, read_side  # noqa: E402
from dtq.engine.read_side.budget import read_budget  # noqa: E402
from dtq.engine.submit import Submission, submit  # noqa: E402
from tests.testapp import tasks  # noqa: E402

READS: dict[str, Callable[[], Any]] = {
    "queue_overview": lambda: read_side.queue_overview("tests"),
    "overview (one queue)": lambda: read_side.overview(),
    "list_tasks QUEUED, 50": lambda: read_side.list_tasks("tests", "QUEUED", 50),
    "list_tasks every state, 50": lambda: read_side.list_tasks("tests", None, 50),
    "search_dlq, 50": lambda: read_side.search_dlq(["tests"], 50),
    "throughput, 60 minutes": lambda: read_side.throughput("tests", 60),
}


def measure(url: str, shards: int, n: int) -> dict[str, int]:
    """Return the commands each read spends with `shards` shards and n queued tasks."""
    prefix = "readcost" + uuid.uuid4().hex[:8]
    dtq = {**settings.DTQ, "REDIS_URL": url, "KEY_PREFIX": prefix, "SHARDS": shards}
    try:
        with override_settings(DTQ=dtq):
            for i in range(n):
                task_id = ids.new_id(i % shards)
                submit(Submission(name=tasks.record.name, queue="tests", task_id=task_id))
            spent = {}
            for label, read in READS.items():
                with read_budget(100_000) as budget:
                    read()
                spent[label] = budget.spent
            return spent
    finally:
        client = redis.Redis.from_url(url)
        for key in client.scan_iter(f"{prefix}:*", count=1000):
            client.delete(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 3])
    parser.add_argument("-n", type=int, default=60, help="tasks to submit")
    args = parser.parse_args()
    url = os.environ["DTQ_REDIS_URL"]
    rows = {shards: measure(url, shards, args.n) for shards in args.shards}
    print("read".ljust(30) + "".join(f"SHARDS={s}".rjust(10) for s in rows))
    for label in READS:
        print(label.ljust(30) + "".join(str(r[label]).rjust(10) for r in rows.values()))


if __name__ == "__main__":
    main()
