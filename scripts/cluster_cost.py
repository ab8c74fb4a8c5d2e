"""Throughput and Redis CPU per task: one server, then a local Redis Cluster at 1..N shards.

Runs scripts/redis_cost.py's submit + drain (one no-op task per submit call, from
--submitters processes at once, then --workers `dtq_worker --burst` processes) against a
private redis-server, then against a local 3-primary Redis Cluster (tests/topology.py, ports
17000-17005) reached through a node that owns no shard, once per --shards count. Before the
runs, each shard's slot is moved to a primary of its own (shard n is the hash tag {n}; {1}
and {2} hash to the same primary's range), so N shards load N primaries.

Per run it prints the wall rates and every primary's Redis CPU per task (CPU seconds of
INFO cpu over all tasks of the run), and the ceiling: tasks / the busiest primary's CPU
seconds, the rate at which that primary would fill one core.

    .venv/bin/python scripts/cluster_cost.py [-n 10000] [--shards 1 2 3] [--submitters 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("redis_cost", ROOT / "scripts" / "redis_cost.py")
assert _spec and _spec.loader
cost: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost)


def in_parallel(count: int, job: Any, *args: Any) -> float:
    """Run job(*args) in `count` threads at once (each starts a child process); return the
    wall time until the last one ends."""
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        for future in [pool.submit(job, *args) for _ in range(count)]:
            future.result()
    return time.perf_counter() - started


def cpu_of(clients: dict[int, redis.Redis]) -> dict[int, float]:
    """Return each server's Redis CPU seconds (user + sys) by port."""
    return {port: cost.snapshot(client)[0] for port, client in clients.items()}


def run(
    label: str, port: int, env: dict[str, str], servers: dict[int, redis.Redis], opts: Any
) -> None:
    """Submit and drain n tasks through the server on port (and env: Cluster, shards); print
    wall rates and each server's CPU per task."""
    work = tempfile.mkdtemp(prefix="dtq-cluster-cost-")
    prefix = f"{cost.PREFIX}{time.time_ns()}"  # a fresh key space per run
    environ = dict(os.environ, **cost.dtq_env(port, prefix, work), PYTHONPATH=str(ROOT), **env)
    each = opts.n // opts.submitters
    n = each * opts.submitters
    try:
        cpu0 = cpu_of(servers)
        submit = in_parallel(opts.submitters, cost.submit_all, each, 0, environ)
        cpu1 = cpu_of(servers)
        drained = in_parallel(opts.workers, cost.drain, environ, opts.concurrency)
        cpu2 = cpu_of(servers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    used = {port: cpu2[port] - cpu0[port] for port in servers}
    per_task = ", ".join(f"{port}: {used[port] * 1e6 / n:5.1f}" for port in sorted(used))
    busiest = max(used.values())
    submit_cpu = sum(cpu1.values()) - sum(cpu0.values())
    print(
        f"{label}: submit {n / submit:6.0f} tasks/s ({submit_cpu * 1e6 / n:5.1f} us CPU/task), "
        f"drain {n / drained:6.0f} tasks/s; whole lifecycle "
        f"{sum(used.values()) * 1e6 / n:5.1f} us Redis CPU/task in all, per primary [{per_task}];"
        f" ceiling {n / busiest:7.0f} tasks/s (busiest primary at one core)",
        flush=True,
    )


def node_id(client: redis.Redis) -> str:
    return str(client.execute_command("CLUSTER MYID"))


def spread_shards(cluster: Any, shards: int) -> None:
    """Move the (empty) slot of each shard to a primary no lower shard uses."""
    from tests.topology import wait_until

    primaries = [s for s in cluster.servers if s.client().info("replication")["role"] == "master"]
    used: set[int] = set()
    for shard in range(shards):
        tag = f"{{{shard}}}"
        owner = cluster.owner(tag)
        if owner.port not in used or len(used) == len(primaries):
            used.add(owner.port)
            continue
        target = next(p for p in primaries if p.port not in used)
        slot = key_slot(tag.encode())
        src, dst = owner.client(), target.client()
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", node_id(src))
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", node_id(dst))
        for server in primaries:  # the slot has no keys: nothing to MIGRATE
            server.client().execute_command("CLUSTER SETSLOT", slot, "NODE", node_id(dst))
        wait_until(lambda t=tag, p=target.port: cluster.owner(t).port == p, f"{tag} moved")
        used.add(target.port)
    wait_until(cluster._ready, "the cluster healthy after moving slots")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--shards", type=int, nargs="+", default=[1], help="shard counts to run")
    parser.add_argument("--submitters", type=int, default=1, help="submitting processes at once")
    parser.add_argument("--workers", type=int, default=1, help="dtq_worker --burst processes")
    opts = parser.parse_args()
    from tests.topology import CLUSTER_PORT, LocalCluster

    with cost.private_redis("cost") as (client, _):
        port = client.connection_pool.connection_kwargs["port"]
        run("one server        ", port, {}, {port: client}, opts)
    cluster = LocalCluster(CLUSTER_PORT).start()
    try:
        spread_shards(cluster, max(opts.shards))
        owners = {cluster.owner(f"{{{shard}}}").port for shard in range(max(opts.shards))}
        primaries = {
            s.port: s.client()
            for s in cluster.servers
            if s.client().info("replication")["role"] == "master"
        }
        idle = [p for p in primaries if p not in owners]
        seed = primaries[idle[0]] if idle else next(iter(primaries.values()))
        seed_port = seed.connection_pool.connection_kwargs["port"]
        for shards in opts.shards:
            env = {"DTQ_REDIS_CLUSTER": "1", "DTQ_SHARDS": str(shards)}
            label = f"cluster, {shards} shard{'s' if shards > 1 else ' '}"
            run(label, seed_port, env, primaries, opts)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
