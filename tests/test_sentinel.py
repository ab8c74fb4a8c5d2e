"""dtq behind Sentinel: following failovers, READONLY retried, durable submit (SUBMIT_REPLICAS).

Each test starts its own primary, replica and three Sentinels on loopback ports
(tests/topology.py) and, where it fails over, SIGKILLs the primary by its pid.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.sentinel

import dtq
from dtq.engine import ops
from dtq.engine.audit import Actor
from dtq.engine.connection import get_client
from dtq.engine.errors import NotReplicated
from dtq.engine.sentinels import PRIMARY_CHECK_S
from dtq.models import AuditEntry
from tests.conftest import Env, wait_for
from tests.testapp import tasks
from tests.topology import SERVICE, LocalSentinel, Server, free_block, require_redis_server

pytestmark = [pytest.mark.slow, pytest.mark.scaleout]


def use_sentinel(env: Env, topology: LocalSentinel, **settings: Any) -> None:
    """Point dtq (here and in processes started later) and env.client at the Sentinels."""
    env.url = topology.primary().url  # only a process's fallback: the Sentinels decide
    env.configure(
        REDIS_URL=env.url,
        REDIS_SENTINELS=topology.addresses,
        REDIS_SENTINEL_SERVICE=SERVICE,
        **settings,
    )
    env.client.close()
    manager = redis.sentinel.Sentinel(topology.addresses, socket_timeout=2)
    env.client = manager.master_for(SERVICE, decode_responses=True, socket_timeout=5)


@pytest.fixture
def sentinel(dtq_env: Env, request: pytest.FixtureRequest) -> Iterator[LocalSentinel]:
    """A primary + replica(s) + 3 Sentinels of this test's own, with dtq_env following them.

    One replica unless the test asks for more (indirect parametrization).
    """
    require_redis_server()
    shared = dtq_env.url
    topology = LocalSentinel(free_block(), replicas=getattr(request, "param", 1)).start()
    use_sentinel(dtq_env, topology)
    yield topology
    dtq_env.stop_all()
    dtq_env.configure(REDIS_SENTINELS=None, REDIS_SENTINEL_SERVICE=None)
    dtq_env.use_server(shared)  # the shared server holds nothing of this test's
    topology.stop()


def finished(result: Any) -> Any:
    def check() -> bool:
        result.refresh()
        return bool(result.is_finished)

    return check


def test_tasks_run_behind_sentinel(dtq_env, sentinel):
    results = [tasks.record.enqueue(i) for i in range(5)]
    assert isinstance(get_client().connection_pool, redis.sentinel.SentinelConnectionPool)
    dtq_env.worker()
    for result in results:
        wait_for(finished(result))
        assert result.state == dtq.TaskState.SUCCEEDED
    assert dtq_env.client.exists(dtq_env.keys.task(results[0].id))


def test_durable_submit_returns_once_the_replica_has_the_task(dtq_env, sentinel):
    use_sentinel(dtq_env, sentinel, SUBMIT_REPLICAS=1)
    replica = sentinel.data[1].client()
    for i in range(20):
        result = tasks.record.enqueue(i)
        # Read from the replica at once: WAIT made enqueue() wait for it.
        assert replica.hget(dtq_env.keys.task(result.id), "state") == "QUEUED"


def test_durable_submit_says_when_replicas_are_missing(dtq_env, sentinel):
    use_sentinel(dtq_env, sentinel, SUBMIT_REPLICAS=2, SUBMIT_REPLICAS_TIMEOUT=0.2)
    started = time.monotonic()
    with pytest.raises(NotReplicated, match=r"only 1 of 2 replica\(s\) confirmed it") as caught:
        tasks.record.enqueue(1)
    assert time.monotonic() - started < 3
    assert caught.value.wanted == 2 and caught.value.got == 1
    # Not undone: the task is on the primary and runs.
    task_id = caught.value.what.split()[1]
    assert dtq_env.client.hget(dtq_env.keys.task(task_id), "state") == "QUEUED"


@pytest.mark.django_db(transaction=True)
def test_operator_actions_wait_for_replicas_too(dtq_env, sentinel):
    actor = Actor(name="ops", source="command")
    use_sentinel(dtq_env, sentinel, SUBMIT_REPLICAS=1)
    assert ops.pause_queue("tests", actor=actor, reason="durable") is True
    assert sentinel.data[1].client().sismember(dtq_env.keys.paused, "tests")

    use_sentinel(dtq_env, sentinel, SUBMIT_REPLICAS=2, SUBMIT_REPLICAS_TIMEOUT=0.2)
    with pytest.raises(NotReplicated, match="the resume action is on the primary"):
        ops.resume_queue("tests", actor=actor, reason="durable")
    row = AuditEntry.objects.latest("id")
    assert (row.action, row.outcome) == ("resume", "refused")
    assert "only 1 of 2 replica(s)" in row.detail
    assert not dtq_env.client.sismember(dtq_env.keys.paused, "tests")  # done on the primary


def test_readonly_after_a_switchover_is_retried(dtq_env, sentinel):
    tasks.record.enqueue(0)  # this thread's submit connection now points at the primary
    old = sentinel.primary()
    sentinel.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", SERVICE)
    wait_for(lambda: sentinel.primary() is not old, timeout=20)
    wait_for(lambda: old.client().info("replication")["role"] == "slave", timeout=20)
    # The old primary answers READONLY now: the submit reconnects to the new one instead.
    result = tasks.record.enqueue(1)
    assert sentinel.primary().client().hget(dtq_env.keys.task(result.id), "state") == "QUEUED"


# Two replicas: after the failover the new primary still has one, so SUBMIT_REPLICAS=1 holds.
@pytest.mark.parametrize("sentinel", [2], indirect=True)
def test_every_role_follows_a_failover_without_a_restart(dtq_env, sentinel):
    use_sentinel(dtq_env, sentinel, SUBMIT_REPLICAS=1)
    worker = dtq_env.worker("--with-scheduler", "--with-reaper", "--concurrency", "4")
    before = [tasks.record.enqueue(i) for i in range(10)]
    delayed = [tasks.record.using(run_after=timedelta(seconds=2)).enqueue(i) for i in range(5)]
    wait_for(lambda: all(finished(r)() for r in before))
    sentinel.fail_over()
    after, errors = [], []
    deadline = time.monotonic() + 20
    while len(after) < 10 and time.monotonic() < deadline:
        try:
            after.append(tasks.record.enqueue(100 + len(after)))
        except (redis.RedisError, dtq.DtqError) as exc:
            errors.append(exc)  # not acknowledged: a caller would retry it
            time.sleep(0.1)
    assert len(after) == 10, errors[-3:]
    for result in [*before, *delayed, *after]:
        wait_for(finished(result), timeout=30)
        assert result.state == dtq.TaskState.SUCCEEDED
    assert worker.poll() is None  # the same process, never restarted


def depose(topology: LocalSentinel) -> tuple[Server, Server]:
    """Make the Sentinels name the replica as primary while the old primary stays up and
    writable, as one cut off from them (or too slow to answer) is while they promote another.

    Return (old, new). The Sentinels forget the old primary, so nothing converts it.
    """
    old, new = topology.primary(), topology.data[1]
    new.client().replicaof("NO", "ONE")
    for server in topology.sentinels:
        client = server.client()
        client.execute_command("SENTINEL", "REMOVE", SERVICE)
        client.execute_command("SENTINEL", "MONITOR", SERVICE, "127.0.0.1", new.port, 2)
    assert topology.primary() is new
    return old, new


def wait_until_enqueued_on(env: Env, server: Server) -> None:
    """Enqueue until a task lands on server: this process has moved its connections there."""
    client = server.client()
    # Without a check the connection stays on the old primary for as long as it lives.
    wait_for(
        lambda: client.exists(env.keys.task(tasks.record.enqueue(1).id)),
        timeout=3 * PRIMARY_CHECK_S + 2,
        interval=0.05,
    )


def test_open_connections_leave_a_deposed_primary(dtq_env, sentinel):
    tasks.record.enqueue(0)  # this process's pooled connection is on the old primary now
    old, new = depose(sentinel)
    wait_until_enqueued_on(dtq_env, new)
    for i in range(20):  # every pooled connection moved, not just one
        result = tasks.record.enqueue(i)
        assert new.client().exists(dtq_env.keys.task(result.id))
        assert not old.client().exists(dtq_env.keys.task(result.id))


def test_a_running_worker_leaves_a_deposed_primary(dtq_env, sentinel):
    dtq_env.worker("--concurrency", "2")
    first = tasks.record.enqueue(0)
    wait_for(finished(first))  # the worker's connections are on the old primary now
    _, new = depose(sentinel)
    wait_until_enqueued_on(dtq_env, new)
    results = [tasks.record.enqueue(i) for i in range(5)]
    for result in results:
        wait_for(finished(result), timeout=10)  # read from the new primary
        assert result.state == dtq.TaskState.SUCCEEDED
