"""Engine bugs the chaos suite found, each pinned by a deterministic test.

redis-py's Retry (dtq.engine.connection) resends a command whose reply was lost to a dropped
connection. A chaos run showed it for scripts: Redis SIGKILLed after a submit was written to
the AOF but before the reply left, and the client resent the same EVALSHA after the restart.
These tests send the same script call twice, exactly as that retry does.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

import dtq
from dtq.embedded import RedisServer
from dtq.engine import layout, submit
from dtq.engine.connection import get_client
from dtq.engine.keys import GROUP
from tests.conftest import Env, wait_for
from tests.script_calls import Scripts
from tests.testapp import tasks

pytestmark = pytest.mark.slow

SETTLED = {"pending": 0, "running": 0, "schedule": 0}


def send_twice(sub: submit.Submission) -> tuple[list[Any], list[Any]]:
    """Run submit.lua twice with the same keys and arguments (a resent call)."""
    key_list, argv = submit.prepare(sub)
    script = Scripts.of(get_client()).submit_one
    return script(keys=key_list, args=argv), script(keys=key_list, args=argv)


def submission(task: dtq.Task, *args: Any) -> submit.Submission:
    return task.submission(args, {})


def test_resent_submit_creates_one_task(dtq_env: Env) -> None:
    first, again = send_twice(submission(tasks.record, "x"))

    assert first[0] == "ok" and again[:2] == ["ok", first[1]]
    assert dtq_env.client.xlen(dtq_env.keys.stream("tests", 1)) == 1
    assert len(dtq_env.events("TASK_SUBMITTED")) == 1
    stats = dtq_env.stats()
    assert (stats["submitted"], stats["active"]) == (1, 1)


def test_resent_keyed_submit_is_accepted_not_in_progress(dtq_env: Env) -> None:
    keyed = tasks.record.using(idempotency_key="resent-1")
    first, again = send_twice(submission(keyed, "x"))

    assert first[0] == "ok"
    assert again[:2] == ["ok", first[1]]  # not IdempotencyInProgress for its own task
    assert dtq_env.client.xlen(dtq_env.keys.stream("tests", 1)) == 1


def test_resent_submit_leaves_a_running_task_alone(dtq_env: Env) -> None:
    key_list, argv = submit.prepare(submission(tasks.hold, 1.0))
    script = Scripts.of(get_client()).submit_one
    task_id = script(keys=key_list, args=argv)[1]
    dtq_env.worker()
    wait_for(lambda: dtq_env.witnessed("hold"))

    assert script(keys=key_list, args=argv)[:2] == ["ok", task_id]  # arrives late, mid-run
    result = dtq.TaskResult.load(task_id)
    assert (result.state, result.attempt) == (dtq.TaskState.RUNNING, 1)
    wait_for(lambda: dtq.TaskResult.load(task_id).is_finished)
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert [row["phase"] for row in dtq_env.witnessed("hold")] == ["start", "end"]
    stats = dtq_env.stats()
    assert (stats["submitted"], stats["active"], stats.get("absorbed", 0)) == (1, 0, 0)
    assert dtq_env.leftovers() == SETTLED


def read_as(env: Env, consumer: str) -> list[Any]:
    """XREADGROUP the tests queue's normal band as `consumer`; return (entry id, task id)s."""
    stream = env.keys.stream("tests", 1)
    env.client.xgroup_create(stream, GROUP, "0", mkstream=True)
    reply = env.client.xreadgroup(GROUP, consumer, {stream: ">"})
    return [(eid, fields["t"]) for eid, fields in reply[0][1]]


def claim_as(env: Env, worker: str, entries: list[Any]) -> list[Any]:
    """Call claim.lua the way the worker does, for entries of the tests queue's normal band."""
    refs = [layout.TaskRef(task_id, "tests") for _, task_id in entries]
    keys, argv = layout.build(env.keys, ["tests"], refs, layout=layout.of("claim"))
    args = [v for eid, _ in entries for v in (1, 1, eid)]
    return list(Scripts.of(get_client()).claim(keys=keys, args=[*argv, worker, 3000, *args]))


def test_resent_claim_hands_the_attempt_back(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    entries = read_as(dtq_env, "w1")
    first = claim_as(dtq_env, "w1", entries)
    again = claim_as(dtq_env, "w1", entries)  # the same call: its reply was lost

    assert again == first  # same task, same attempt: the worker runs it once
    assert first[0] == result.id and int(first[6]) == 1
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.RUNNING, 1)
    assert dtq_env.stats().get("absorbed", 0) == 0
    assert len(dtq_env.events("TASK_STARTED")) == 1


def test_another_workers_claim_of_a_running_entry_is_still_absorbed(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    entries = read_as(dtq_env, "w1")
    assert claim_as(dtq_env, "w1", entries)[0] == result.id

    assert claim_as(dtq_env, "w2", entries) == []  # a stale duplicate for anyone else
    result.refresh()
    assert (result.state, result.attempt, result.record["worker"]) == ("RUNNING", 1, "w1")
    assert dtq_env.stats()["absorbed"] == 1


def finalize_as(env: Env, worker: str, claimed: list[Any], kind: str = "success") -> list[Any]:
    """Call finalize.lua the way the worker does, for one claimed attempt of the tests queue."""
    task_id, eid, attempt = claimed[0], claimed[1], claimed[6]
    history = f'{{"attempt":{attempt},"worker":"{worker}","outcome":"{kind}"}}'
    keys, argv = layout.build(
        env.keys, ["tests"], [layout.TaskRef(task_id, "tests")], layout=layout.of("finalize")
    )
    args = [*argv, "1", worker, 1, 1, eid, attempt, kind, '"done"', history, 0]
    reply = Scripts.of(get_client()).finalize(keys=keys, args=args)
    return [1 if state else 0 for state in reply[::2]]  # (state decided, resent) per outcome


def test_resent_finalize_is_not_counted_as_stale(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    claimed = claim_as(dtq_env, "w1", read_as(dtq_env, "w1"))

    assert finalize_as(dtq_env, "w1", claimed) == [1]
    assert finalize_as(dtq_env, "w1", claimed) == [1]  # the same call: its reply was lost
    result.refresh()
    assert (result.state, len(result.history)) == (dtq.TaskState.SUCCEEDED, 1)
    assert dtq_env.stats().get("stale", 0) == 0
    assert dtq_env.events("TASK_STALE_COMPLETION_REJECTED") == []


def test_completion_after_a_reclaim_is_still_rejected(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    claimed = claim_as(dtq_env, "w1", read_as(dtq_env, "w1"))
    dtq_env.client.hset(dtq_env.keys.task(result.id), "lease", 0)  # as if w1 stopped renewing
    keys, argv = layout.build(dtq_env.keys, ["tests"], [layout.TaskRef(result.id, "tests")])
    reclaim = Scripts.of(get_client()).reclaim
    assert reclaim(keys=keys, args=[*argv, "1", 1, result.id])[0] == 1

    assert finalize_as(dtq_env, "w1", claimed) == [0]
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.QUEUED, 1)
    assert dtq_env.stats()["stale"] == 1


def test_worker_keeps_a_new_attempt_of_a_task_it_lost_while_paused(dtq_env: Env) -> None:
    # Found by the chaos suite's Redis-outage probe: the worker tracked its attempts by task
    # id, so when the zombie attempt 1 finished, it dropped attempt 2 of the same task from its
    # heartbeat; attempt 2 was reclaimed from a live worker, then 3, until the DLQ.
    only = dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    result = tasks.hold.enqueue(4.0)
    wait_for(lambda: dtq_env.witnessed("hold"))
    only.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: dtq_env.stats().get("reclaimed"))  # attempt 1 taken back
    finally:
        only.send_signal(signal.SIGCONT)  # attempt 2 can only go to this same worker
    wait_for(lambda: dtq.TaskResult.load(result.id).is_finished, timeout=30)

    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)
    assert [h["outcome"] for h in result.history] == ["lost", "succeeded"]
    starts = [row for row in dtq_env.witnessed("hold") if row["phase"] == "start"]
    assert [(row["pid"], row["attempt"]) for row in starts] == [(only.pid, 1), (only.pid, 2)]
    assert dtq_env.stats()["reclaimed"] == 1
    assert dtq_env.leftovers() == SETTLED


def test_redis_outage_longer_than_the_lease_steals_no_running_task(
    dtq_env: Env, private_redis: RedisServer
) -> None:
    # Nobody could renew a lease while Redis was down: right after it restarts, expired
    # leases and silent heartbeats say nothing about the workers, so the reaper waits.
    worker = dtq_env.worker()
    dtq_env.spawn("dtq_reaper")
    result = tasks.hold.enqueue(6.0)
    wait_for(lambda: dtq_env.witnessed("hold"))
    private_redis.restart(signal.SIGTERM, downtime=3.0)  # twice the 1.5 s lease
    wait_for(lambda: dtq.TaskResult.load(result.id).is_finished, timeout=30)

    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert [row["phase"] for row in dtq_env.witnessed("hold")] == ["start", "end"]
    assert dtq_env.stats().get("reclaimed", 0) == 0
    assert worker.poll() is None
    assert dtq_env.leftovers() == SETTLED


def freezes(env: Env) -> list[dict[str, Any]]:
    """Return the freezes the failpoints of this test's processes logged."""
    path = env.witness_path.parent / "failpoints.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_worker_frozen_between_claim_and_handler_start_never_runs_it(dtq_env: Env) -> None:
    # Issue #12: with 3 workers, lease 3 s and heartbeat 0.5 s, a worker that claimed attempt 1
    # was frozen for 5 s before its handler began. Attempt 2 ran elsewhere and the task
    # succeeded; the frozen worker then woke up and started attempt 1's handler anyway.
    dtq_env.configure(LEASE_TIMEOUT=3.0, HEARTBEAT_INTERVAL=0.5)
    log = str(dtq_env.witness_path.parent / "failpoints.jsonl")
    frozen = dtq_env.worker(failpoints="worker.before_handler@1:freeze=5", DTQ_FAILPOINTS_LOG=log)
    result = tasks.record.enqueue("x")
    wait_for(lambda: freezes(dtq_env))  # claimed, and stopped right before the handler
    others = [dtq_env.worker(), dtq_env.worker()]
    dtq_env.spawn("dtq_reaper")
    wait_for(lambda: dtq.TaskResult.load(result.id).is_finished, timeout=20)

    def woke() -> bool:  # and either skipped attempt 1 or ran it
        ran = [row for row in dtq_env.witnessed("record") if row["pid"] == frozen.pid]
        return bool(ran or dtq_env.stats().get("start_skipped"))

    wait_for(woke, timeout=20)

    runs = dtq_env.witnessed("record")
    assert [(row["attempt"], row["pid"] in {w.pid for w in others}) for row in runs] == [
        (2, True)
    ]  # attempt 1 never ran
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)
    assert [h["outcome"] for h in result.history] == ["lost", "succeeded"]
    [event] = dtq_env.events("TASK_START_SKIPPED")
    assert (event["attempt"], event["reason"], event["given_back"]) == (1, "lease_expired", False)
    [skip] = json.loads(dtq_env.client.hget(dtq_env.keys.task(result.id), "skips"))
    assert (skip["attempt"], skip["reason"]) == (1, "lease_expired")
    assert skip["worker"].split(".")[-2] == str(frozen.pid)
    assert frozen.poll() is None
    assert dtq_env.leftovers() == SETTLED
