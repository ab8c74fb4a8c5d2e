"""dtq on a Redis Cluster (REDIS_CLUSTER): slot routing, MOVED and failover followed.

The module's cluster (3 primaries, 3 replicas, ports 17000-17005) is reached through a seed
node that does not serve shard 0's slot, so every test also checks that dtq finds the right
primary by itself. The failover test has a cluster of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import dtq
from dtq.engine import connection, ids, scripts
from dtq.engine.errors import NotReplicated
from tests.conftest import Env, wait_for
from tests.testapp import tasks
from tests.topology import CLUSTER_PORT, LocalCluster, free_block, require_redis_server

pytestmark = [pytest.mark.slow, pytest.mark.scaleout]
SHARD0 = "{0}"  # the hash tag of every key of shard 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    require_redis_server()
    topology = LocalCluster(CLUSTER_PORT).start()
    yield topology
    topology.stop()


def use_cluster(env: Env, topology: LocalCluster, **settings: Any) -> None:
    """Point dtq at a seed node that must redirect, and env.client at shard 0's primary."""
    env.url = topology.not_owner(SHARD0).url
    env.configure(REDIS_URL=env.url, REDIS_CLUSTER=True, **settings)
    env.client.close()
    env.client = redis.Redis.from_url(topology.owner(SHARD0).url, decode_responses=True)


@pytest.fixture
def on_cluster(dtq_env: Env, cluster: LocalCluster) -> Iterator[LocalCluster]:
    shared = dtq_env.url
    use_cluster(dtq_env, cluster)
    yield cluster
    dtq_env.stop_all()
    owner = dtq_env.client  # delete this test's keys from the cluster
    keys = list(owner.scan_iter(f"{dtq_env.prefix}:*", count=1000))
    if keys:
        owner.delete(*keys)
    dtq_env.configure(REDIS_CLUSTER=False)
    dtq_env.use_server(shared)


def finished(result: Any) -> Any:
    def check() -> bool:
        result.refresh()
        return bool(result.is_finished)

    return check


def port_of(client: redis.Redis) -> int:
    return int(client.info("server")["tcp_port"])


def test_tasks_run_on_a_cluster_reached_through_any_node(dtq_env, on_cluster):
    results = [tasks.record.enqueue(i) for i in range(5)]
    delayed = tasks.record.using(run_after=timedelta(seconds=0.5)).enqueue("later")
    dtq_env.worker("--with-scheduler", "--with-reaper")
    for result in [*results, delayed]:
        wait_for(finished(result))
        assert result.state == dtq.TaskState.SUCCEEDED
    assert dtq_env.client.exists(dtq_env.keys.task(results[0].id))  # on shard 0's primary
    assert port_of(connection.get_client()) == on_cluster.owner(SHARD0).port
    # Loaded on first use on the primary that ran the scripts (the seed node ran none).
    assert dtq_env.client.function_list(library=scripts.library().name)
    assert not on_cluster.not_owner(SHARD0).client().function_list(library=scripts.library().name)


def test_client_for_key_reaches_the_primary_of_the_keys_slot(dtq_env, on_cluster):
    for tag in ("{0}", "{1}", "{7}", "{12}"):
        client = connection.client_for_key(f"{dtq_env.prefix}:{tag}:t:x")
        assert port_of(client) == on_cluster.owner(tag).port
    assert connection.client_for_key("a:{0}:b") is connection.get_client()


def switch_over(topology: LocalCluster) -> Any:
    """Promote shard 0's replica gracefully (the old primary steps down and answers MOVED)."""
    old = topology.owner(SHARD0)
    replica = next(
        s
        for s in topology.servers
        if s.alive() and s.client().info("replication").get("master_port") == old.port
    )
    replica.client().execute_command("CLUSTER FAILOVER")
    wait_for(lambda: topology.owner(SHARD0) is replica, timeout=20)
    return replica


def test_moved_after_a_switchover_is_followed(dtq_env, on_cluster):
    tasks.record.enqueue(0)  # this thread's submit connection now points at the primary
    replica = switch_over(on_cluster)
    # The old primary answers MOVED now: the submit reconnects to the new one instead.
    result = tasks.record.enqueue(1)
    assert replica.client().hget(dtq_env.keys.task(result.id), "state") == "QUEUED"
    dtq_env.client = replica.client()  # for the fixture's clean-up
    dtq_env.worker()
    wait_for(finished(result))


def test_a_running_worker_follows_a_switchover(dtq_env, on_cluster):
    # The old primary stays up as a replica, so the worker's open connections are answered
    # MOVED rather than dropped: its reads, claims, finalizes and renewals must reconnect.
    dtq_env.worker()
    first = tasks.record.enqueue(0)
    wait_for(finished(first))
    dtq_env.client = switch_over(on_cluster).client()  # for the fixture's clean-up
    results = [tasks.record.enqueue(i) for i in range(1, 20)]
    for result in results:
        wait_for(finished(result), timeout=20)
        assert result.state == dtq.TaskState.SUCCEEDED


def test_every_script_keeps_to_one_slot(dtq_env, on_cluster):
    # A cluster node refuses a script whose keys span slots (CROSSSLOT) or live on another
    # node: a lifecycle with retries, the DLQ, a replay and a purge touches most scripts.
    ok = tasks.record.enqueue(1)
    retried = tasks.flaky.enqueue(1)
    dead = tasks.poison.enqueue()
    dtq_env.worker("--with-scheduler", "--with-reaper")
    for result in (ok, retried, dead):
        wait_for(finished(result))
    assert (ok.state, retried.state) == (dtq.TaskState.SUCCEEDED, dtq.TaskState.SUCCEEDED)
    assert dead.state == dtq.TaskState.DEAD_LETTERED
    assert ids.shard_of(dead.id) == 0


@pytest.fixture
def own_cluster(dtq_env: Env) -> Iterator[LocalCluster]:
    """A cluster of this test's own: it loses a primary."""
    require_redis_server()
    shared = dtq_env.url
    topology = LocalCluster(free_block()).start()
    yield topology
    dtq_env.stop_all()
    dtq_env.configure(REDIS_CLUSTER=False)
    dtq_env.use_server(shared)
    topology.stop()


def test_a_killed_primary_loses_no_acknowledged_task(dtq_env, own_cluster):
    use_cluster(dtq_env, own_cluster, SUBMIT_REPLICAS=1, SUBMIT_REPLICAS_TIMEOUT=0.5)
    worker = dtq_env.worker("--with-scheduler", "--with-reaper", "--concurrency", "4")
    accepted, refused = [], 0
    killed = None
    deadline = time.monotonic() + 40
    while len(accepted) < 60 and time.monotonic() < deadline:
        if len(accepted) == 20 and killed is None:
            killed = own_cluster.owner(SHARD0)
            new = own_cluster.fail_over(SHARD0)
            dtq_env.client = new.client()
            killed.start()  # it rejoins as the new primary's replica: durable submits resume
        try:
            accepted.append(tasks.record.enqueue(len(accepted)))
        except (redis.RedisError, NotReplicated):
            refused += 1  # not acknowledged: the caller knows and may retry
            time.sleep(0.05)
    assert killed is not None and len(accepted) == 60
    for result in accepted:
        wait_for(finished(result), timeout=30)
        assert result.state == dtq.TaskState.SUCCEEDED
    assert worker.poll() is None  # the same process throughout
