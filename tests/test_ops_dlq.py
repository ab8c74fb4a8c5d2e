"""The dead-letter queue: list, show, replay (one, many, concurrent), discard, purge."""

from __future__ import annotations

import threading

import pytest

import dtq
from dtq.engine import ops, read_side
from dtq.engine.dlq import DlqFilter
from dtq.engine.errors import IdempotencyInProgress
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import (
    ACTOR,
    claim_by_hand,
    dead_letter_by_hand,
    events,
    finalize_by_hand,
    keys,
    orphans,
)
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def dead(n: int, queue: str = "tests", **using) -> list[str]:
    """Submit n `record` tasks and dead-letter them by hand; return their ids, oldest first."""
    for i in range(n):
        tasks.record.using(queue_name=queue, **using).enqueue(i)
    return dead_letter_by_hand(n, queue)


def state(task_id: str) -> str:
    return dtq.TaskResult.load(task_id).state


# ----- read side -------------------------------------------------------------------------


def test_list_is_newest_first_and_paginated(dtq_env):
    ids = dead(5)
    page = read_side.dlq_entries("tests", limit=2)
    assert [e["task_id"] for e in page["entries"]] == ids[::-1][:2]
    assert page["total"] == 5
    seen = [e["task_id"] for e in page["entries"]]
    while page["next_cursor"]:
        page = read_side.dlq_entries("tests", limit=2, before=page["next_cursor"])
        seen += [e["task_id"] for e in page["entries"]]
    assert seen == ids[::-1]
    entry = read_side.dlq_entries("tests", limit=1)["entries"][0]
    assert entry["name"] == "tests.testapp.tasks.record"
    assert entry["payload"] == {"args": [4], "kwargs": {}}
    assert entry["error"] == {"class": "builtins.ValueError", "message": "by hand"}
    assert entry["attempts"] == 1 and entry["max_attempts"] == 3


def test_show_gives_payload_errors_and_history(dtq_env):
    (task_id,) = dead(1)
    detail = read_side.dlq_detail(task_id)
    assert detail["entry"]["task_id"] == task_id
    assert detail["record"]["state"] == "DEAD_LETTERED"
    assert detail["history"] == [{"attempt": 1, "outcome": "fail"}]
    assert read_side.dlq_detail("0" * 22) is None
    dtq_env.client.delete(keys().task(task_id))  # the record went past retention
    detail = read_side.dlq_detail(task_id)
    assert detail["record"] is None and detail["entry"]["task_id"] == task_id


# ----- replay ----------------------------------------------------------------------------


def test_replay_restarts_attempts_and_keeps_the_history(dtq_env):
    (task_id,) = dead(1)
    assert ops.replay(task_id, actor=ACTOR, reason="fixed the bug") == "replayed"
    result = dtq.TaskResult.load(task_id)
    assert (result.state, result.attempt) == (dtq.TaskState.QUEUED, 0)
    assert result.record["dlq"] == ""
    assert dtq_env.client.ttl(keys().task(task_id)) == -1  # no retention TTL while alive
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert [h["outcome"] for h in result.history] == ["fail", "replayed"]
    (claimed,) = claim_by_hand()
    assert claimed["attempt"] == 1
    finalize_by_hand(claimed, "success", data="ok")
    result.refresh()
    assert result.state == dtq.TaskState.SUCCEEDED
    assert dtq_env.stats()["active"] == 0
    assert dtq_env.stats()["replayed"] == 1
    assert len(events(dtq_env.client, "TASK_REPLAYED", task_id)) == 1
    row = AuditEntry.objects.get()
    assert (row.action, row.task_id, row.queue, row.affected, row.reason) == (
        "replay",
        task_id,
        "tests",
        1,
        "fixed the bug",
    )


def test_replay_into_another_queue(dtq_env):
    (task_id,) = dead(1, idempotency_key="move-me")
    ops.replay(task_id, actor=ACTOR, to_queue="elsewhere")
    record = read_side.get_task(task_id)
    assert (record["queue"], record["state"], record["idem"]) == ("elsewhere", "QUEUED", "")
    assert dtq_env.client.zscore(keys().index("elsewhere", "QUEUED"), task_id) is not None
    assert dtq_env.client.zscore(keys().index("tests", "DEAD_LETTERED"), task_id) is None
    assert claim_by_hand("elsewhere")[0]["id"] == task_id
    # The key belonged to the task in its old queue: it is free there now.
    assert not tasks.record.using(idempotency_key="move-me").enqueue(0).duplicate


def test_replay_in_place_reopens_the_idempotency_key(dtq_env):
    (task_id,) = dead(1, idempotency_key="same-place")
    ops.replay(task_id, actor=ACTOR)
    with pytest.raises(IdempotencyInProgress):
        tasks.record.using(idempotency_key="same-place").enqueue(0)


def test_replay_after_the_record_expired_rebuilds_it_from_the_entry(dtq_env):
    (task_id,) = dead(1, priority=60, max_attempts=7)
    dtq_env.client.delete(keys().task(task_id))
    assert ops.replay(task_id, actor=ACTOR) == "recreated"
    record = read_side.get_task(task_id)
    assert record["state"] == "QUEUED"
    assert record["name"] == "tests.testapp.tasks.record"
    assert record["payload"] == {"args": [0], "kwargs": {}}
    assert (record["priority"], record["band"], record["max_attempts"]) == (60, 0, 7)
    assert dtq_env.client.xlen(keys().stream("tests", 0)) == 1
    assert orphans(dtq_env.client) == []


@pytest.mark.slow
def test_replayed_task_runs_again_in_a_real_worker(dtq_env):
    result = tasks.poison.enqueue()
    dtq_env.worker("--with-scheduler")
    wait_for(lambda: state(result.id) == "DEAD_LETTERED")
    ops.replay(result.id, actor=ACTOR)
    wait_for(lambda: len(dtq_env.witnessed("poison")) == 6)
    wait_for(lambda: state(result.id) == "DEAD_LETTERED")
    result.refresh()
    assert [h["outcome"] for h in result.history] == ["retry"] * 2 + ["failed", "replayed"] + [
        "retry"
    ] * 2 + ["failed"]
    assert [r["attempt"] for r in dtq_env.witnessed("poison")] == [1, 2, 3, 1, 2, 3]


def test_replaying_what_is_not_in_the_dlq_is_refused(dtq_env):
    result = tasks.record.enqueue()
    with pytest.raises(dtq.NotInDeadLetterQueue):
        ops.replay(result.id, actor=ACTOR)
    with pytest.raises(dtq.NotInDeadLetterQueue):
        ops.replay("0" * 22, actor=ACTOR)
    assert list(AuditEntry.objects.values_list("outcome", flat=True)) == ["refused"] * 2


@pytest.mark.django_db(transaction=True)  # audit rows are written from several threads
@pytest.mark.parametrize("expired", [False, True], ids=["record", "record-expired"])
def test_two_concurrent_replays_of_one_entry_make_one_run(dtq_env, expired):
    ids = dead(15)
    if expired:  # then only the entry itself can tell the second replay it is too late
        dtq_env.client.delete(*(keys().task(task_id) for task_id in ids))
    outcomes: dict[str, list[str]] = {task_id: [] for task_id in ids}

    def replay(task_id: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            outcomes[task_id].append(ops.replay(task_id, actor=ACTOR))
        except dtq.NotInDeadLetterQueue:
            outcomes[task_id].append("refused")

    for task_id in ids:
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=replay, args=(task_id, barrier)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    for task_id in ids:
        first, second = sorted(outcomes[task_id], key=lambda o: o in ("refused", "done"))
        assert first == ("recreated" if expired else "replayed")
        # Refused when it looked the entry up too late; 'done' when it reached replay.lua
        # after the first took the entry (the same answer as a resent call: no second run).
        assert second in ("refused", "done")
        assert len(events(dtq_env.client, "TASK_REPLAYED", task_id)) == 1
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == len(ids)
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert len(claim_by_hand(n=100)) == len(ids)
    assert AuditEntry.objects.filter(action="replay").count() == 2 * len(ids)


def test_bulk_replay_by_filter_in_batches(dtq_env):
    ids = dead(120)
    other = dead(3, queue="other")
    for _ in range(2):
        tasks.record.enqueue()
    (claimed, _) = claim_by_hand(n=2)
    finalize_by_hand(claimed, "fail", data={"class": "app.GatewayDown", "message": "503"})
    seen: list[int] = []
    result = ops.replay_many(
        "tests",
        actor=ACTOR,
        flt=DlqFilter(error="ValueError"),
        progress=lambda r: seen.append(r.done),
    )
    assert result.done == 120 and result.task_ids == ids
    assert seen == [100, 120]  # one script call per batch
    assert [e["error"]["class"] for e in read_side.dlq_entries("tests")["entries"]] == [
        "app.GatewayDown"
    ]
    assert read_side.dlq_entries("other")["total"] == len(other)
    row = AuditEntry.objects.get()
    assert row.affected == 120 and row.parameters["filter"] == {"error": "ValueError"}


def test_bulk_replay_honours_name_and_limit(dtq_env):
    dead(5)
    result = ops.replay_many(
        "tests", actor=ACTOR, flt=DlqFilter(name="tests.testapp.tasks.record", limit=2)
    )
    assert result.done == 2
    assert read_side.dlq_entries("tests")["total"] == 3
    assert ops.replay_many("tests", actor=ACTOR, flt=DlqFilter(name="nope")).done == 0


# ----- discard and purge -----------------------------------------------------------------


def test_discard_after_the_record_expired_releases_the_key_its_entry_names(dtq_env):
    # The key comes from the DLQ entry (no read of the record first): with the record gone
    # the entry is all that names it.
    (task_id,) = dead(1, idempotency_key="outlived")
    dtq_env.client.delete(keys().task(task_id))
    ops.discard(task_id, actor=ACTOR, queue="tests", reason="old")
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert not dtq_env.client.exists(keys().idempotency("tests", "outlived"))
    assert not tasks.record.using(idempotency_key="outlived").enqueue(0).duplicate


def test_discard_removes_the_entry_and_releases_the_key(dtq_env):
    (task_id,) = dead(1, idempotency_key="discard-me")
    ops.discard(task_id, actor=ACTOR, reason="bad data")
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    record = read_side.get_task(task_id)
    assert record["state"] == "DEAD_LETTERED" and record["dlq"] == ""
    assert record["discarded_at"]
    assert not tasks.record.using(idempotency_key="discard-me").enqueue(0).duplicate
    with pytest.raises(dtq.NotInDeadLetterQueue):
        ops.replay(task_id, actor=ACTOR)
    with pytest.raises(dtq.NotInDeadLetterQueue):
        ops.discard(task_id, actor=ACTOR)
    assert [e["reason"] for e in events(dtq_env.client, "TASK_DISCARDED")] == ["bad data"]
    assert list(AuditEntry.objects.order_by("id").values_list("action", "outcome")) == [
        ("discard", "ok"),
        ("replay", "refused"),
        ("discard", "refused"),
    ]


def test_discard_of_an_entry_whose_record_expired(dtq_env):
    (task_id,) = dead(1)
    dtq_env.client.delete(keys().task(task_id))
    ops.discard(task_id, actor=ACTOR, queue="tests")
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert not dtq_env.client.exists(keys().task(task_id))


def test_purge_dlq_in_batches_with_one_audit_row(dtq_env):
    dead(230)
    batches: list[int] = []
    result = ops.purge_dlq(
        "tests", actor=ACTOR, reason="old junk", progress=lambda r: batches.append(r.done)
    )
    assert result.done == 230
    assert batches == [100, 200, 230]
    assert dtq_env.client.xlen(keys().dlq("tests")) == 0
    assert dtq_env.stats()["discarded"] == 230
    row = AuditEntry.objects.get()
    assert (row.action, row.affected, row.reason, row.outcome) == (
        "dlq_purge",
        230,
        "old junk",
        "ok",
    )


def test_purge_dlq_needs_a_reason(dtq_env):
    with pytest.raises(dtq.DtqError, match="reason"):
        ops.purge_dlq("tests", actor=ACTOR, reason=" ")


@pytest.mark.parametrize("expired", [False, True], ids=["record", "record-expired"])
def test_a_resent_replay_answers_done_and_runs_once(dtq_env, expired):
    from dtq.engine.dlq import replay_entries

    [task_id] = dead(1)
    row = read_side.find_dlq_entry(task_id, "tests")
    assert row is not None
    if expired:
        dtq_env.client.delete(keys().task(task_id))
    first = replay_entries("tests", [row])
    again = replay_entries("tests", [row])  # the same call: a dropped connection lost the reply
    assert first == ["recreated" if expired else "replayed"] and again == ["done"]
    assert len(events(dtq_env.client, "TASK_REPLAYED", task_id)) == 1
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == 1
