"""Flow control inside the scripts, call by call: resends, releases, wake-ups and rates."""

from __future__ import annotations

from typing import Any

import pytest

from dtq.conf import dtq_settings
from dtq.engine import gateway, layout, ops
from dtq.engine.connection import get_client
from dtq.engine.reaper import Reaper
from tests.conftest import wait_for
from tests.ops_support import ACTOR, claim_by_hand, finalize_by_hand, keys
from tests.script_calls import Scripts
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def read_and_claim_call(queue: str = "tests", n: int = 10, worker: str = "w1") -> Any:
    """Read up to n entries as worker; return the claim call's (keys, args), not sent yet."""
    scripts = Scripts.of(get_client())
    k, argv = layout.build(keys(), [queue], layout=layout.of("read"))
    entries, _ = scripts.read(keys=k, args=[*argv, worker, n])
    refs, args = [], []
    for i in range(0, len(entries), 5):
        qi, band, eid, task_id, idem = entries[i : i + 5]
        refs.append(layout.TaskRef(task_id or "gone", queue, idem or ""))
        args += [qi, band, eid]
    k, argv = layout.build(keys(), [queue], refs, layout=layout.of("claim"))
    return k, [*argv, worker, int(dtq_settings.lease_timeout * 1000), *args]


def claimed_rows(reply: list[Any], worker: str = "w1") -> list[dict[str, Any]]:
    return [
        {"id": a.id, "entry": a.entry, "band": a.band, "attempt": a.attempt, "idem": a.idem}
        | {"worker": worker}
        for a in gateway.CLAIMED.decode(reply)
    ]


def line(client: Any, queue: str = "tests") -> list[str]:
    return client.zrange(keys().limit_wait(queue), 0, -1)


def held(client: Any, queue: str = "tests") -> list[str]:
    return client.zrange(keys().limit_held(queue), 0, -1)


def stream_length(client: Any, queue: str = "tests") -> int:
    return sum(client.xlen(keys().stream(queue, band)) for band in (0, 1, 2))


def test_a_claim_sent_twice_parks_a_task_once(dtq_env: Any) -> None:
    client = dtq_env.client
    first = tasks.per_customer.enqueue("acme", 0, 0)
    second = tasks.per_customer.enqueue("acme", 1, 0)
    script = Scripts.of(get_client()).claim
    k, args = read_and_claim_call()
    reply = script(keys=k, args=args)
    again = script(keys=k, args=args)  # a resend after a lost reply
    assert [r["id"] for r in claimed_rows(reply)] == [first.id]
    assert [r["id"] for r in claimed_rows(again)] == [first.id]  # handed back, not re-run
    assert len(line(client)) == 1 and second.id in line(client)[0]
    record = client.hgetall(keys().task(second.id))
    assert record["state"] == "QUEUED" and record["attempt"] == "0" and record["delivery"] == ""
    assert record["waiting"].startswith("waiting: concurrency 1/1 on task ")
    assert client.hget(keys().limits("tests"), "seq") == "1"  # one place in line, not two
    assert dtq_env.stats()["limit_waits"] == 1


def test_a_finalize_sent_twice_hands_the_slot_on_once(dtq_env: Any) -> None:
    client = dtq_env.client
    tasks.per_customer.enqueue_many([(("acme", i, 0), {}) for i in range(3)])
    k, args = read_and_claim_call()
    (running,) = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args))
    assert len(line(client)) == 2
    entries_before = stream_length(client)
    assert finalize_by_hand(running, "success", data=None) == 1
    assert finalize_by_hand(running, "success", data=None) == 1  # resend: recorded already
    assert len(line(client)) == 1  # exactly one waiter woken
    # The finished entry was deleted, and the woken waiter got one entry of its own.
    assert stream_length(client) == entries_before
    (woken_slot,) = held(client)
    k, args = read_and_claim_call(worker="w2")
    (woken_row,) = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args), "w2")
    assert woken_slot.endswith(woken_row["id"])  # the slot handed on is the one it runs with
    assert client.hget(keys().task(woken_row["id"]), "lh") == "1"


def test_a_retry_a_failure_and_a_reclaim_each_release_the_slot(dtq_env: Any) -> None:
    client = dtq_env.client
    for outcome in ("retry", "fail"):
        tasks.pair_limited.enqueue(0)
        (row,) = claim_by_hand()
        assert len(held(client)) == 1
        assert finalize_by_hand(row, outcome, delay_ms=60_000) == 1
        assert held(client) == []
    dtq_env.configure(LEASE_TIMEOUT=0.2)
    tasks.pair_limited.enqueue(0)
    claim_by_hand(n=1)
    assert len(held(client)) == 1
    import time

    time.sleep(0.3)
    reaper = Reaper()
    wait_for(lambda: reaper.run_once() >= 0 and held(client) == [])  # after the lease ran out


def test_cancelling_a_woken_task_hands_its_slot_to_the_next(dtq_env: Any) -> None:
    client = dtq_env.client
    results = [tasks.per_customer.enqueue("acme", i, 0) for i in range(3)]
    k, args = read_and_claim_call()
    (running,) = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args))
    finalize_by_hand(running, "success")
    assert results[1].id in held(client)[0]  # handed the slot, entry on its way
    ops.cancel(results[1].id, actor=ACTOR)
    assert results[2].id in held(client)[0]  # passed on again
    assert line(client) == []
    k, args = read_and_claim_call(worker="w2")
    rows = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args), "w2")
    assert [r["id"] for r in rows] == [results[2].id]  # the cancelled one's entry is absorbed


def test_a_woken_entry_left_by_a_dead_reader_is_delivered_again(dtq_env: Any) -> None:
    client = dtq_env.client
    dtq_env.configure(VISIBILITY_TIMEOUT=0.05, LEASE_TIMEOUT=0.5)  # (the reaper waits 2 leases
    # after a Redis start: the embedded one may have just started)
    results = [tasks.per_customer.enqueue("acme", i, 0) for i in range(2)]
    k, args = read_and_claim_call()
    (running,) = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args))
    finalize_by_hand(running, "success")
    read_and_claim_call(worker="dead")  # read the woken entry, never claim it
    reaper = Reaper()
    rows: list[dict[str, Any]] = []

    def redelivered() -> bool:
        reaper.run_once()
        k, args = read_and_claim_call(worker="w2")
        rows.extend(claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args), "w2"))
        return bool(rows)

    wait_for(redelivered)
    assert [r["id"] for r in rows] == [results[1].id]
    assert client.hget(keys().task(results[1].id), "state") == "RUNNING"


def test_a_rate_refusal_schedules_the_task_for_its_token(dtq_env: Any) -> None:
    client = dtq_env.client
    results = [tasks.rated.enqueue() for _ in range(3)]
    k, args = read_and_claim_call()
    rows = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args))
    assert [r["id"] for r in rows] == [results[0].id]
    due = [client.zscore(keys().schedule, r.id) for r in results[1:]]
    assert due[1] - due[0] == pytest.approx(50, abs=1)  # 20/s: one start each 50 ms, in order
    record = client.hgetall(keys().task(results[1].id))
    assert record["state"] == "PENDING" and record["attempt"] == "0"
    assert record["waiting"].startswith("waiting: rate 20/s on task tests.testapp.tasks.rated")
    assert record["lp"] == str(int(due[0]))


def test_limits_script_sent_twice_changes_and_wakes_once(dtq_env: Any) -> None:
    client = dtq_env.client
    ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=1)
    tasks.record.enqueue_many([((i,), {}) for i in range(4)])
    k, args = read_and_claim_call()
    Scripts.of(get_client()).claim(keys=k, args=args)
    assert len(line(client)) == 3
    script = Scripts.of(get_client()).limits
    k, argv = layout.build(keys(), ["tests"])
    call = [*argv, 3, "", "1"]
    assert script(keys=k, args=call) == [1, 3]
    assert script(keys=k, args=call) == [1, 3]  # resent: nobody woken twice
    assert stream_length(client) == 1 + 2  # the running task's entry, two woken waiters
    assert len(dtq_env.events("QUEUE_LIMITS_CHANGED")) == 2  # set to 1, then to 3: not twice


def test_a_waiter_woken_after_its_queue_limit_was_cleared_leaves_no_slot(dtq_env: Any) -> None:
    client = dtq_env.client
    ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=1)
    tasks.record.enqueue_many([((i,), {}) for i in range(3)])
    k, args = read_and_claim_call()
    (first,) = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args))
    assert len(line(client)) == 2
    ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=None)  # wakes both waiters
    assert line(client) == [] and len(held(client)) == 3  # the woken hold their slots
    k, args = read_and_claim_call(worker="w2")
    rows = claimed_rows(Scripts.of(get_client()).claim(keys=k, args=args), "w2")
    assert len(rows) == 2  # both start: no limit any more
    finalize_by_hand(first, "success")
    for row in rows:
        finalize_by_hand(row, "success")
    assert held(client) == [] and line(client) == []
