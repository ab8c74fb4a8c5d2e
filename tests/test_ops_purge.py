"""Queue purge: count first, cancel waiting tasks in batches, leave nothing orphaned."""

from __future__ import annotations

from datetime import timedelta

import pytest

import dtq
from dtq.engine import layout, ops
from dtq.engine.connection import get_client
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import ACTOR, claim_by_hand, events, finalize_by_hand, keys, orphans
from tests.script_calls import Scripts
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def fill() -> dict[str, list[str]]:
    """Two queued, one delayed, one retrying, one running task, plus one in another queue."""
    made = {"queued": [], "scheduled": []}
    running = tasks.record.enqueue("running").id
    retrying = tasks.record.enqueue("retrying").id
    first, second = claim_by_hand(n=2)
    finalize_by_hand(second, "retry", delay_ms=60_000)
    made["running"] = [first["id"]]
    assert (first["id"], second["id"]) == (running, retrying)
    made["scheduled"] += [retrying, tasks.record.using(run_after=timedelta(hours=1)).enqueue().id]
    made["queued"] += [tasks.record.enqueue(i).id for i in range(2)]
    made["other"] = [tasks.record.using(queue_name="other").enqueue().id]
    return made


def test_preview_counts_without_changing_anything(dtq_env):
    fill()
    preview = ops.preview_purge("tests")
    assert (preview.queued, preview.scheduled, preview.running, preview.total) == (2, 2, 1, 4)
    assert AuditEntry.objects.count() == 0
    assert ops.preview_purge("tests") == preview


def test_purge_cancels_waiting_tasks_and_leaves_running_ones(dtq_env):
    made = fill()
    result = ops.purge_queue("tests", actor=ACTOR, reason="bad deploy")
    assert (result.queued, result.scheduled, result.running, result.purged) == (2, 2, 1, 4)
    for task_id in made["queued"] + made["scheduled"]:
        record = dtq.TaskResult.load(task_id).record
        assert record["state"] == "CANCELLED" and record["cancel_reason"] == "purged"
        assert record["error"]["message"] == "purged: bad deploy"
    assert dtq.TaskResult.load(made["running"][0]).state == dtq.TaskState.RUNNING
    assert dtq.TaskResult.load(made["other"][0]).state == dtq.TaskState.QUEUED
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == 1  # the running task's entry
    assert dtq_env.client.zcard(keys().schedule) == 0
    assert dtq_env.stats()["active"] == 1
    assert dtq_env.stats()["purged"] == 4
    assert orphans(dtq_env.client) == [] and orphans(dtq_env.client, "other") == []
    purged = events(dtq_env.client, "TASK_CANCELLED")
    assert sorted(e["task"] for e in purged) == sorted(made["queued"] + made["scheduled"])
    assert {e["reason"] for e in purged} == {"purged"}
    row = AuditEntry.objects.get()
    assert (row.action, row.queue, row.affected, row.reason, row.outcome) == (
        "purge",
        "tests",
        4,
        "bad deploy",
        "ok",
    )
    assert row.parameters["running_left"] == 1


def test_purge_releases_idempotency_keys(dtq_env):
    first = tasks.record.using(idempotency_key="purge-me").enqueue()
    result = ops.purge_queue("tests", actor=ACTOR, reason="reset")
    assert result.released_keys == 1
    again = tasks.record.using(idempotency_key="purge-me").enqueue()
    assert again.id != first.id and not again.duplicate


def test_purge_works_in_bounded_batches(dtq_env):
    from dtq.engine.purge import BATCH

    for i in range(2 * BATCH + 50):
        tasks.record.enqueue(i)
    calls: list[int] = []
    result = ops.purge_queue(
        "tests", actor=ACTOR, reason="flood", progress=lambda r: calls.append(r.purged)
    )
    assert result.purged == 2 * BATCH + 50
    assert calls == [BATCH, 2 * BATCH, 2 * BATCH + 50]
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == 0
    assert AuditEntry.objects.get().affected == 2 * BATCH + 50


def test_an_entry_read_but_not_claimed_is_absorbed_after_a_purge(dtq_env):
    result = tasks.record.enqueue()
    k, argv = layout.build(keys(), ["tests"], layout=layout.of("read"))
    Scripts.of(get_client()).read(keys=k, args=[*argv, "slow-worker", 1])  # now in its PEL
    ops.purge_queue("tests", actor=ACTOR, reason="x")
    assert dtq_env.leftovers()["pending"] == 0
    assert claim_by_hand() == []
    assert dtq.TaskResult.load(result.id).state == dtq.TaskState.CANCELLED


def test_stale_entries_and_index_members_are_cleaned(dtq_env):
    done = tasks.record.enqueue().id
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "success", data=1)
    stream = keys().stream("tests", 1)
    dtq_env.client.xadd(stream, {"t": done, "a": 1})  # a stale duplicate of a finished task
    dtq_env.client.xadd(stream, {"t": "0" * 22, "a": 1})  # an entry whose record is gone
    ghost = "0" * 21 + "1"
    dtq_env.client.zadd(keys().index("tests", "QUEUED"), {ghost: 1})  # index without record
    result = ops.purge_queue("tests", actor=ACTOR, reason="tidy")
    assert (result.purged, result.entries_removed) == (0, 2)
    assert dtq_env.client.xlen(stream) == 0
    assert dtq_env.client.zcard(keys().index("tests", "QUEUED")) == 0


def test_tasks_submitted_during_the_purge_are_kept(dtq_env):
    for i in range(5):
        tasks.record.enqueue(i)
    late: list[str] = []

    def submit_once(_: object) -> None:
        if not late:
            late.append(tasks.record.enqueue("late").id)

    result = ops.purge_queue("tests", actor=ACTOR, reason="x", progress=submit_once)
    assert result.purged == 5
    assert dtq.TaskResult.load(late[0]).state == dtq.TaskState.QUEUED
    assert orphans(dtq_env.client) == []


def test_purge_needs_a_reason_and_a_valid_queue(dtq_env):
    with pytest.raises(dtq.DtqError, match="reason"):
        ops.purge_queue("tests", actor=ACTOR, reason="")
    with pytest.raises(dtq.DtqError, match="invalid queue name"):
        ops.purge_queue("bad queue", actor=ACTOR, reason="x")
    assert list(AuditEntry.objects.values_list("outcome", flat=True)) == ["refused"]


@pytest.mark.slow
def test_purge_while_workers_run(dtq_env):
    results = [tasks.hold.enqueue(0.01) for _ in range(400)]
    dtq_env.worker("--concurrency", "4")
    dtq_env.worker("--concurrency", "4")
    wait_for(lambda: len(dtq_env.witnessed("hold")) >= 20)
    purged = ops.purge_queue("tests", actor=ACTOR, reason="mid-flight")
    assert 0 < purged.purged < len(results)

    def settled() -> bool:
        for r in results:
            r.refresh()
        return all(r.is_finished for r in results)

    wait_for(settled, timeout=30, interval=0.2)
    started = {e["task"] for e in events(dtq_env.client, "TASK_STARTED")}
    succeeded = {e["task"] for e in events(dtq_env.client, "TASK_SUCCEEDED")}
    cancelled = {e["task"] for e in events(dtq_env.client, "TASK_CANCELLED")}
    ran = {row["id"] for row in dtq_env.witnessed("hold")}
    assert len(cancelled) == purged.purged
    assert not cancelled & succeeded and not cancelled & started and not cancelled & ran
    for r in results:
        assert r.state in (dtq.TaskState.SUCCEEDED, dtq.TaskState.CANCELLED)
        assert (r.state == dtq.TaskState.CANCELLED) == (r.id in cancelled)
    assert succeeded | cancelled == {r.id for r in results}
    wait_for(lambda: dtq_env.leftovers()["pending"] == 0)
    assert orphans(dtq_env.client) == []
    assert dtq_env.stats()["active"] == 0
    assert AuditEntry.objects.get().parameters["queued"] == purged.queued
