"""Throughput and Redis CPU per task: one server against one shard on a Redis Cluster.

Runs scripts/redis_cost.py's submit + drain (one no-op task per submit call, one
`dtq_worker --burst` process) against a private redis-server, then against a local 3-primary
Redis Cluster (tests/topology.py, ports 17000-17005) reached through a node that does not
serve shard 0. With SHARDS = 1 every key is in one slot, so one primary does all the work:
the figure to compare is the owner's CPU per task and the wall time.

    .venv/bin/python scripts/cluster_cost.py [-n 10000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("redis_cost", ROOT / "scripts" / "redis_cost.py")
assert _spec and _spec.loader
cost: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost)


def run(label: str, url: str, owner: redis.Redis, n: int, concurrency: int, **env: str) -> None:
    """Submit and drain n tasks through url; print wall times and the owner's CPU per task."""
    work = tempfile.mkdtemp(prefix="dtq-cluster-cost-")
    environ = dict(
        os.environ,
        DTQ_REDIS_URL=url,
        DTQ_KEY_PREFIX=cost.PREFIX,
        DTQ_VAR_DIR=work,
        DJANGO_SETTINGS_MODULE="dtq_project.settings",
        PYTHONPATH=str(ROOT),
        **env,
    )
    try:
        cpu0, _ = cost.snapshot(owner)
        submit = cost.submit_all(n, 0, environ)
        cpu1, _ = cost.snapshot(owner)
        drained = cost.drain(environ, concurrency)
        cpu2, _ = cost.snapshot(owner)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{label}: submit {n / submit:7.0f} tasks/s ({(cpu1 - cpu0) * 1e6 / n:5.1f} us CPU/task), "
        f"drain {n / drained:7.0f} tasks/s ({(cpu2 - cpu1) * 1e6 / n:5.1f} us CPU/task), "
        f"whole lifecycle {(cpu2 - cpu0) * 1e6 / n:5.1f} us Redis CPU/task"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    opts = parser.parse_args()
    from tests.topology import CLUSTER_PORT, LocalCluster

    work = tempfile.mkdtemp(prefix="dtq-cost-")
    proc, client = cost.start_redis(work)
    try:
        port = client.connection_pool.connection_kwargs["port"]
        url = f"redis://127.0.0.1:{port}/0"
        run("one server      ", url, client, opts.n, opts.concurrency)
    finally:
        proc.kill()
        proc.wait()
    cluster = LocalCluster(CLUSTER_PORT).start()
    try:
        owner = cluster.owner("{0}")
        seed = cluster.not_owner("{0}").url
        run(
            "cluster, 1 shard",
            seed,
            owner.client(),
            opts.n,
            opts.concurrency,
            DTQ_REDIS_CLUSTER="1",
        )
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
