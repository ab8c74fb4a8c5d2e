"""The lean hot path: batched writes, one event entry per call, compact task records."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dtq.engine import codec
from dtq.engine.errors import BulkSubmitError, IdempotencyInProgress, InvalidTaskError, QueueFull
from dtq.engine.keys import BANDS, GROUP
from dtq.engine.read_side import get_task
from dtq.engine.submit import Accepted, Submission, submit_many
from tests.conftest import Env
from tests.ops_support import claim_by_hand, finalize_by_hand
from tests.testapp import tasks


def test_a_batch_claimed_and_finished_leaves_every_index_in_step(dtq_env: Env) -> None:
    ids = [tasks.record.enqueue(i).id for i in range(5)]
    claimed = claim_by_hand("tests", 5, worker="w1")
    client, keys = dtq_env.client, dtq_env.keys
    running = dict(client.zrange(keys.index("tests", "RUNNING"), 0, -1, withscores=True))
    assert sorted(running) == sorted(ids)
    for task_id, score in running.items():  # the index is the reaper's: by lease deadline
        assert int(score) == int(client.hget(keys.task(task_id), "lease"))
    assert client.zcard(keys.index("tests", "QUEUED")) == 0

    for c in claimed:
        assert finalize_by_hand(c, "success", data=1) == 1
    assert client.zcard(keys.index("tests", "RUNNING")) == 0
    assert sorted(client.zrange(keys.index("tests", "SUCCEEDED"), 0, -1)) == sorted(ids)
    for band in BANDS:
        stream = keys.stream("tests", band)
        if client.exists(stream):
            assert client.xpending(stream, GROUP)["pending"] == 0
            assert client.xlen(stream) == 0  # acknowledged entries are deleted


def test_acknowledged_entries_leave_the_stream_and_pending_or_unread_ones_stay(
    dtq_env: Env,
) -> None:
    # Finalize trims below the oldest pending entry and deletes acknowledged entries above it:
    # whichever way, the stream keeps exactly its pending and unread entries.
    client, stream = dtq_env.client, dtq_env.keys.stream("tests", 1)
    for i in range(5):
        tasks.record.enqueue(i)
    first, second, third = claim_by_hand("tests", 3, worker="w1")  # two entries stay unread

    def left() -> list[str]:
        return [eid for eid, _ in client.xrange(stream)]

    # Finished out of order: the oldest claimed entry is still pending, the two after it go.
    assert finalize_by_hand(third, "success", data=1) == 1
    assert finalize_by_hand(second, "success", data=1) == 1
    assert first["entry"] in left() and len(left()) == 3
    assert client.xpending(stream, GROUP)["pending"] == 1
    # The last pending entry goes; nothing is pending, and the unread entries stay readable.
    assert finalize_by_hand(first, "success", data=1) == 1
    assert len(left()) == 2 and client.xpending(stream, GROUP)["pending"] == 0
    rest = claim_by_hand("tests", 5, worker="w1")
    assert [c["entry"] for c in rest] == left()
    for c in rest:
        assert finalize_by_hand(c, "success", data=1) == 1
    assert client.xlen(stream) == 0


def test_a_success_is_recorded_when_its_stream_is_gone(dtq_env: Env) -> None:
    # Redis lost the stream (and its group) while the task ran: the outcome is still recorded.
    task_id = tasks.record.enqueue(1).id
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    dtq_env.client.delete(dtq_env.keys.stream("tests", 1))
    assert finalize_by_hand(claimed, "success", data=1) == 1
    record = get_task(task_id)
    assert record is not None and record["state"] == "SUCCEEDED"


def test_a_success_keeps_the_record_compact_and_its_history_whole(dtq_env: Env) -> None:
    task_id = tasks.record.enqueue(1).id
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    now = time.time()
    entry = {"attempt": 1, "worker": "w1", "started_at": now, "ended_at": now}
    history = codec.dumps({**entry, "outcome": "succeeded"})  # as the worker writes it
    assert finalize_by_hand(claimed, "success", data=1, history=history) == 1

    # No value longer than 64 bytes: Redis keeps the hash compact (no conversion); the encoding
    # is called ziplist before Redis 7.
    encoding = dtq_env.client.object("encoding", dtq_env.keys.task(task_id))
    assert encoding in ("listpack", "ziplist")
    record = get_task(task_id)
    assert record is not None
    [entry] = record["history"]
    assert entry["attempt"] == 1 and entry["worker"] == "w1"
    assert entry["outcome"] == "succeeded"
    assert entry["started_at"] and entry["ended_at"] >= entry["started_at"]
    assert record["lease"] is None


def test_a_resent_success_is_applied_once(dtq_env: Env) -> None:
    task_id = tasks.record.enqueue(1).id
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    assert finalize_by_hand(claimed, "success", data=1) == 1
    assert finalize_by_hand(claimed, "success", data=1) == 1  # the same call sent again
    assert dtq_env.stats().get("stale", 0) == 0
    assert len(dtq_env.events("TASK_SUCCEEDED")) == 1
    # Another worker's outcome for the same attempt is stale, not a resend.
    assert finalize_by_hand({**claimed, "worker": "w2"}, "success", data=1) == 0
    record = get_task(task_id)
    assert record is not None and len(record["history"]) == 1


def test_a_finished_record_and_its_result_expire_after_their_ttls(dtq_env: Env) -> None:
    # finalize.lua gives the deadlines as absolute times (PEXPIREAT, SET PXAT).
    dtq_env.configure(RETENTION=3600, RESULT_TTL=600)
    ok, failed = (tasks.record.enqueue(i).id for i in range(2))
    first, second = claim_by_hand("tests", 2, worker="w1")
    assert finalize_by_hand(first, "success", data=1, history="") == 1
    assert finalize_by_hand(second, "fail") == 1
    client, keys = dtq_env.client, dtq_env.keys
    for task_id in (ok, failed):
        assert 3590 < client.ttl(keys.task(task_id)) <= 3600
    assert 590 < client.ttl(keys.result(ok)) <= 600


def test_a_resent_success_without_a_history_entry_is_applied_once(dtq_env: Env) -> None:
    # The gateway sends a success with an empty history entry: the resend check still holds.
    tasks.record.enqueue(1)
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    assert finalize_by_hand(claimed, "success", data=1, history="") == 1
    assert finalize_by_hand(claimed, "success", data=1, history="") == 1  # sent again
    assert finalize_by_hand({**claimed, "worker": "w2"}, "success", data=1, history="") == 0
    assert dtq_env.stats().get("stale", 0) == 1
    assert len(dtq_env.events("TASK_SUCCEEDED")) == 1


def sub(queue: str = "tests", **kwargs: Any) -> Submission:
    return Submission(name=tasks.record.name, queue=queue, args=(1,), **kwargs)


def test_submit_many_is_one_script_call_with_one_answer_per_task(dtq_env: Env) -> None:
    dtq_env.configure(MAX_QUEUE_DEPTH=0, QUEUE_MAX_DEPTH={"tests": 2})
    events_before = dtq_env.client.xlen(dtq_env.keys.events)
    batch = [
        sub(),
        sub(idempotency_key="k1"),
        sub(idempotency_key="k1"),  # the same key again in the same call: the task in flight
        sub(),  # the third active task of a queue limited to 2
        sub("other", delay=60),
    ]
    results = submit_many(batch)

    first, keyed, again, full, delayed = results
    assert isinstance(first, Accepted) and first.state == "QUEUED"
    assert isinstance(keyed, Accepted) and keyed.state == "QUEUED"
    assert isinstance(again, IdempotencyInProgress)
    assert isinstance(full, QueueFull)
    assert isinstance(delayed, Accepted) and delayed.state == "PENDING"
    # One entry holds the call's three submitted events; the refused tasks wrote nothing.
    assert dtq_env.client.xlen(dtq_env.keys.events) == events_before + 1
    assert [e["task"] for e in dtq_env.events("TASK_SUBMITTED")] == [
        first.id,
        keyed.id,
        delayed.id,
    ]
    assert dtq_env.stats()["submitted"] == 2 and dtq_env.stats("other")["submitted"] == 1
    assert dtq_env.client.xlen(dtq_env.keys.stream("tests", 1)) == 2
    assert dtq_env.client.zscore(dtq_env.keys.schedule, delayed.id)


def test_submit_many_refuses_bad_input_before_writing_anything(dtq_env: Env) -> None:
    with pytest.raises(BulkSubmitError) as info:
        submit_many([sub(), sub(priority=1000)])
    assert isinstance(info.value.errors[1], InvalidTaskError)
    assert dtq_env.client.xlen(dtq_env.keys.events) == 0
    assert not dtq_env.client.exists(dtq_env.keys.stream("tests", 1))


def test_a_submitted_record_writes_no_default_fields(dtq_env: Env) -> None:
    task_id = tasks.record.enqueue(1).id
    raw = dtq_env.client.hgetall(dtq_env.keys.task(task_id))
    assert not {"expires_at", "timeout", "idem", "history"} & set(raw)
    record = get_task(task_id)
    assert record is not None
    assert (record["expires_at"], record["timeout"], record["history"]) == (None, None, None)


def test_the_fields_a_claim_and_a_success_use_come_first_in_the_record(dtq_env: Env) -> None:
    # A compact (listpack) record is scanned from its start for each field read or written:
    # both submit scripts write the claim's and the finalize's fields first.
    one = tasks.record.enqueue(1).id
    [bulk] = submit_many([Submission(name=tasks.record.name, queue="tests", args=(2,))] * 2)[:1]
    assert isinstance(bulk, Accepted)
    for task_id in (one, bulk.id):
        fields = list(dtq_env.client.hgetall(dtq_env.keys.task(task_id)))
        assert fields[:4] == ["state", "delivery", "attempt", "band"]
        assert fields.index("opt") < fields.index("id")


def test_a_claim_reads_the_optional_fields_only_when_the_record_says_it_has_them(
    dtq_env: Env,
) -> None:
    plain = tasks.record.enqueue(1).id
    held = tasks.record.using(timeout=7, idempotency_key="opt-1").enqueue(2).id
    raw = {i: dtq_env.client.hgetall(dtq_env.keys.task(i)) for i in (plain, held)}
    assert (raw[plain]["opt"], raw[held]["opt"]) == ("", "1")
    claimed = {c["id"]: c for c in claim_by_hand("tests", 2)}
    assert (claimed[plain]["idem"], claimed[held]["idem"]) == ("", "opt-1")


def test_a_record_without_opt_is_claimed_with_its_optional_fields(dtq_env: Env) -> None:
    # A record written before 'opt' existed (or rebuilt by a replay) is read whole: an expiry
    # it holds still applies.
    task_id = tasks.record.enqueue(1).id
    tk = dtq_env.keys.task(task_id)
    dtq_env.client.hdel(tk, "opt")
    dtq_env.client.hset(tk, "expires_at", int(time.time() * 1000) - 1000)
    assert claim_by_hand("tests", 1) == []
    record = get_task(task_id)
    assert record is not None and record["state"] == "EXPIRED"


def test_a_claim_and_a_success_leave_updated_at_to_their_own_times(dtq_env: Env) -> None:
    # Neither writes updated_at: decode_record gives the latest of it, started_at and
    # finished_at, which is what they wrote before.
    task_id = tasks.record.enqueue(1).id
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    running = get_task(task_id)
    assert running is not None and running["updated_at"] == running["started_at"]
    assert finalize_by_hand(claimed, "success", data=1) == 1
    done = get_task(task_id)
    assert done is not None and done["updated_at"] == done["finished_at"]
    raw = dtq_env.client.hgetall(dtq_env.keys.task(task_id))
    assert not {"updated_at", "history_n"} & set(raw)  # a success adds no history entry


def test_a_success_leaves_lease_and_delivery_and_the_read_side_shows_neither(
    dtq_env: Env,
) -> None:
    task_id = tasks.record.enqueue(1).id
    [claimed] = claim_by_hand("tests", 1, worker="w1")
    assert finalize_by_hand(claimed, "success", data=1) == 1
    raw = dtq_env.client.hgetall(dtq_env.keys.task(task_id))
    assert raw["delivery"] == claimed["entry"] and raw["lease"]  # not rewritten: ~5 kIr
    record = get_task(task_id)
    assert record is not None and (record["delivery"], record["lease"]) == ("", None)
