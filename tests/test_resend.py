"""Every script sent twice with the same arguments (a resend after a lost reply): the second
answer tells what happened and the state is as after one call. submit, claim, finalize, skip,
progress, replay and periodic_claim/commit have their own resend tests next to their others."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import dtq
from dtq.engine import gateway, layout, read_side
from dtq.engine.connection import get_client, new_async_client
from dtq.engine.direct import AsyncCaller, call_script
from dtq.engine.scripts import script
from tests.ops_support import claim_by_hand, dead_letter_by_hand, keys
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


class Twice:
    """Send every script call twice, as direct.py would after a dropped connection."""

    def __init__(self, monkeypatch: Any) -> None:
        self.sent: list[tuple[str, Any, Any]] = []
        monkeypatch.setattr(gateway, "_call", self._call)

    def _call(self, client: Any, name: str, call: Any) -> Any:
        first = call_script(client, script(name), *call)
        again = call_script(client, script(name), *call)
        self.sent.append((name, first, again))
        return again

    def of(self, name: str) -> list[tuple[Any, Any]]:
        """Return (first, second) replies of each call of the named script."""
        return [(first, again) for sent, first, again in self.sent if sent == name]


@pytest.fixture
def twice(monkeypatch: Any) -> Twice:
    return Twice(monkeypatch)


def events(env: Any, kind: str) -> list[Any]:
    return env.events(kind)


@pytest.mark.parametrize(
    "using", [{}, {"run_after": timedelta(hours=1)}, {"idempotency_key": "k1"}]
)
def test_submit_one(dtq_env: Any, twice: Twice, using: dict[str, Any]) -> None:
    result = tasks.record.using(**using).enqueue(1)
    [(first, again)] = twice.of("submit_one")
    assert first == again and first[:2] == ["ok", result.id]
    state = "PENDING" if using.get("run_after") else "QUEUED"
    assert dtq.TaskResult.load(result.id).state == state
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == (state == "QUEUED")
    assert len(events(dtq_env, "TASK_SUBMITTED")) == 1
    counters = read_side.queue_overview("tests")["counters"]
    assert (counters["submitted"], counters["active"]) == (1, 1)
    assert counters["queued"] == (state == "QUEUED")


def test_cancel_of_a_waiting_task(dtq_env: Any, twice: Twice) -> None:
    task_id = tasks.record.enqueue(1).id
    ref = layout.TaskRef(task_id, "tests")
    assert gateway.cancel(get_client(), keys(), ref, "r").kind == "cancelled"
    assert twice.of("cancel") == [(["cancelled"], ["cancelled"])]
    assert len(events(dtq_env, "TASK_CANCELLED")) == 1
    assert dtq_env.stats()["cancelled"] == 1


def test_cancel_of_a_running_task(dtq_env: Any, twice: Twice) -> None:
    task_id = tasks.record.enqueue(1).id
    claim_by_hand("tests", 1)
    ref = layout.TaskRef(task_id, "tests")
    assert gateway.cancel(get_client(), keys(), ref, "r").kind == "requested"
    assert twice.of("cancel") == [(["requested"], ["requested"])]
    assert len(events(dtq_env, "TASK_CANCEL_REQUESTED")) == 1


def test_a_later_cancel_of_a_cancelled_task_is_still_told_it_finished(dtq_env: Any) -> None:
    task_id = tasks.record.enqueue(1).id
    ref = layout.TaskRef(task_id, "tests")
    assert gateway.cancel(get_client(), keys(), ref, "r").kind == "cancelled"
    assert gateway.cancel(get_client(), keys(), ref, "r") == ("finished", "CANCELLED")


def test_pause_and_resume(dtq_env: Any, twice: Twice) -> None:
    tasks.record.enqueue(1)
    assert gateway.pause(get_client(), keys(), "tests", True, "r") is True
    assert gateway.pause(get_client(), keys(), "tests", False, "r") is True
    assert twice.of("pause") == [(1, 1), (1, 1)]
    assert len(events(dtq_env, "QUEUE_PAUSED")) == len(events(dtq_env, "QUEUE_RESUMED")) == 1
    assert gateway.pause(get_client(), keys(), "tests", False, "r") is False  # a new request
    assert read_side.queue_overview("tests")["counters"]["submitted"] == 1


def test_discard(dtq_env: Any, twice: Twice) -> None:
    tasks.record.enqueue(1)
    [task_id] = dead_letter_by_hand(1)
    entry = read_side.find_dlq_entry(task_id, "tests")
    assert entry is not None
    ref = layout.TaskRef(task_id, "tests")
    statuses = gateway.discard(get_client(), keys(), "tests", [ref], "r", [entry["entry_id"]])
    assert statuses == ["done"] and twice.of("discard") == [(["discarded"], ["done"])]
    assert dtq_env.stats()["discarded"] == 1


def test_op_begin_and_finish(dtq_env: Any, twice: Twice) -> None:
    client = get_client()
    assert gateway.op_begin(client, keys(), "k1", "tok", 5000) == ["acquired"]
    assert gateway.op_finish(client, keys(), "k1", "tok", "done", '"r"', 60) == ["stored", '"r"']
    assert twice.of("op_begin")[0] == (["acquired"], ["acquired"])
    assert twice.of("op_finish") == [(["stored", '"r"'], ["stored", '"r"'])]
    assert gateway.op_begin(client, keys(), "k1", "other", 5000) == ["done", '"r"']


def test_op_renew_and_release(dtq_env: Any, twice: Twice) -> None:
    client = get_client()
    gateway.op_begin(client, keys(), "k2", "tok", 5000)
    assert gateway.op_renew(client, keys(), "k2", "tok", 5000) is True
    gateway.op_finish(client, keys(), "k2", "tok", "failed", "", 0)
    assert twice.of("op_renew") == [(1, 1)]
    assert twice.of("op_finish") == [(["released"], ["lost"])]  # lost: release ignores it
    assert gateway.op_begin(client, keys(), "k2", "next", 5000) == ["acquired"]


def test_reclaim(dtq_env: Any, twice: Twice) -> None:
    task_id = tasks.record.enqueue(1).id
    claim_by_hand("tests", 1)
    dtq_env.client.hset(keys().task(task_id), "lease", 0)
    dtq_env.client.zadd(keys().index("tests", "RUNNING"), {task_id: 0})
    gateway.reclaim(get_client(), keys(), [layout.TaskRef(task_id, "tests")], True)
    [(first, again)] = twice.of("reclaim")
    assert first[0] == 1 and again[:2] == [0, 0]  # the second finds it requeued already
    assert dtq_env.stats()["reclaimed"] == 1
    assert read_side.get_task(task_id)["state"] == "QUEUED"  # type: ignore[index]


def test_forget_queue_and_dlq_trim(dtq_env: Any, twice: Twice) -> None:
    tasks.record.enqueue(1)
    [task_id] = dead_letter_by_hand(1)
    assert gateway.dlq_trim(get_client(), keys(), "tests", 2**62, 10) == 0
    assert twice.of("dlq_trim") == [(1, 0)]  # the second finds nothing older left
    assert read_side.find_dlq_entry(task_id, "tests") is None
    assert gateway.forget_queue(get_client(), keys(), "never-used") is True
    assert twice.of("forget_queue") == [(1, 1)]


def test_renew_and_forget_consumer(dtq_env: Any, twice: Twice) -> None:
    assert gateway.forget_consumer(get_client(), keys(), ["tests"], "nobody") == 0
    assert twice.of("forget_consumer") == [(0, 0)]


def test_promote(dtq_env: Any, twice: Twice) -> None:
    # A delayed task made due by hand: no scheduler runs here, so the two sends are alone.
    task_id = tasks.record.using(run_after=timedelta(seconds=60)).enqueue(1).id
    dtq_env.client.zadd(keys().schedule, {task_id: 0})
    gateway.promote(get_client(), keys(), [layout.TaskRef(task_id, "tests")])
    [(first, again)] = twice.of("promote")
    assert first == [1, 0, 0] and again == [0, 0, 0]  # the second finds it promoted already
    assert read_side.get_task(task_id)["state"] == "QUEUED"  # type: ignore[index]
    assert dtq_env.client.xlen(keys().stream("tests", 1)) == 1  # one delivery, not two
    assert len(events(dtq_env, "TASK_QUEUED")) == 1


def test_periodic_resume(dtq_env: Any, twice: Twice) -> None:
    name = "resend-resume"
    dtq_env.client.hset(keys().periodic(name), mapping={"paused": "1", "cursor": 0})
    assert gateway.periodic_resume(get_client(), keys(), name, 10, "back") is True
    assert twice.of("periodic_resume") == [(1, 1)]  # the resend answers what the first did
    assert dtq_env.client.llen(keys().periodic_log(name)) == 1  # one skip logged, not two
    # A later request (a new token) is told the truth: the schedule was not paused.
    assert gateway.periodic_resume(get_client(), keys(), name, 10, "again") is False


def take(token: str, lease_ms: int = 60000) -> gateway.Taken:
    """Run one take.lua call for worker w1 on the tests queue."""

    async def call() -> gateway.Taken:
        client = new_async_client()
        caller = AsyncCaller(client)
        try:
            return await gateway.take(caller, keys(), ["tests"], "w1", lease_ms, 8, token)
        finally:
            await caller.aclose()
            await client.aclose()

    return asyncio.run(call())


def test_take_sent_again_answers_with_what_the_lost_reply_claimed(dtq_env: Any) -> None:
    # take.lua reads and claims at once: a resend reading on would leave the first send's
    # attempts RUNNING and unrun until their lease ran out, and the reclaim would cost one.
    # One with an idempotency key: take.lua builds that record's key too.
    ids = [tasks.record.enqueue(1).id, tasks.record.using(idempotency_key="k").enqueue(2).id]

    first, again = (take("a")), (take("a"))
    assert sorted(att.id for att in first.attempts) == sorted(ids) and not first.again
    assert again.again and again.read == first.read == 2
    assert sorted(a.idem for a in first.attempts) == ["", "k"]
    assert [(a.id, a.entry, a.attempt) for a in again.attempts] == [
        (a.id, a.entry, a.attempt) for a in first.attempts
    ]
    assert len(events(dtq_env, "TASK_STARTED")) == 2 and dtq_env.stats()["started"] == 2
    assert all(read_side.get_task(i)["attempt"] == 1 for i in ids)  # type: ignore[index]
    # A resend reads nothing new, even when the first send found nothing; a new token reads.
    assert take("b").attempts == []
    third = tasks.record.enqueue(3).id
    assert take("b").attempts == []
    assert [att.id for att in take("c").attempts] == [third]


def test_a_claim_found_again_after_its_lease_ran_out_is_not_handed_back(dtq_env: Any) -> None:
    # A worker stopped (SIGSTOP) longer than its lease while Redis ran its claim loses the
    # reply (its read times out), then finds the entry again among its pending ones. The
    # attempt is no longer handed back (no handler starts after its lease ran out): it stays
    # RUNNING for the reaper's reclaim, which counts the attempt as lost.
    task_id = tasks.record.enqueue(1).id

    async def claim_twice() -> tuple[list[Any], list[Any]]:
        client = new_async_client()
        caller = AsyncCaller(client)
        try:
            entries, _ = await gateway.read(caller, keys(), ["tests"], "w1", 8)
            first = await gateway.claim(caller, keys(), ["tests"], entries, "w1", 50)
            await asyncio.sleep(0.1)
            return first, await gateway.claim(caller, keys(), ["tests"], entries, "w1", 50)
        finally:
            await caller.aclose()
            await client.aclose()

    first, again = asyncio.run(claim_twice())
    assert [att.id for att in first] == [task_id] and again == []
    record = read_side.get_task(task_id)
    assert record is not None and (record["state"], record["attempt"]) == ("RUNNING", 1)
    running = keys().index("tests", "RUNNING")
    assert dtq_env.client.zscore(running, task_id) is not None  # the reaper's to reclaim
    assert dtq_env.stats().get("absorbed", 0) == 0  # nor absorbed: its entry stays pending


def test_take_leaves_an_entry_whose_record_it_cannot_read_to_claim(dtq_env: Any) -> None:
    # take.lua builds task keys itself: one it cannot read (a Cluster slot migrating; here a
    # key of the wrong type) leaves the entry, unwritten, for claim.lua with declared keys.
    good = tasks.record.enqueue(1).id
    bad = tasks.record.enqueue(2).id
    dtq_env.client.delete(keys().task(bad))
    dtq_env.client.set(keys().task(bad), "not a hash")
    taken = take("a")
    assert [att.id for att in taken.attempts] == [good]
    assert [e.task_id for e in taken.left] == [bad] and taken.read == 2
    # A resend hands back what was claimed; the entry left stays pending, for the reaper.
    again = take("a")
    assert [att.id for att in again.attempts] == [good] and again.left == []
