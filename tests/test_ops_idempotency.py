"""Idempotency: submission keys (one task per key) and idempotent_operation in handlers."""

from __future__ import annotations

import threading
import time

import pytest

import dtq
from dtq.engine.errors import IdempotencyConflict, IdempotencyInProgress
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand, finalize_by_hand, keys
from tests.testapp import tasks

# ----- submission keys -------------------------------------------------------------------


def test_key_is_in_progress_then_replays_the_finished_task(dtq_env):
    first = tasks.record.using(idempotency_key="order-1").enqueue(7)
    with pytest.raises(IdempotencyInProgress) as info:
        tasks.record.using(idempotency_key="order-1").enqueue(7)
    assert info.value.task_id == first.id
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "success", data=7)
    again = tasks.record.using(idempotency_key="order-1").enqueue(7)
    assert (again.id, again.duplicate) == (first.id, True)
    assert dtq_env.stats()["submitted"] == 1


def test_key_reused_with_another_payload_is_a_conflict(dtq_env):
    first = tasks.record.using(idempotency_key="order-2").enqueue(1)
    with pytest.raises(IdempotencyConflict) as info:
        tasks.record.using(idempotency_key="order-2").enqueue(2)
    assert info.value.task_id == first.id


def test_keys_are_scoped_by_queue(dtq_env):
    a = tasks.record.using(idempotency_key="k").enqueue()
    b = tasks.record.using(idempotency_key="k", queue_name="other").enqueue()
    assert a.id != b.id


def test_a_failed_or_cancelled_task_is_replayed_not_rerun(dtq_env):
    first = tasks.record.using(idempotency_key="order-3").enqueue()
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "fail")
    again = tasks.record.using(idempotency_key="order-3").enqueue()
    assert (again.id, again.duplicate) == (first.id, True)


def test_many_threads_resubmitting_one_key_make_one_task(dtq_env):
    barrier = threading.Barrier(16)
    seen: list[tuple[str, str]] = []

    def submit() -> None:
        barrier.wait()
        for _ in range(10):
            try:
                r = tasks.record.using(idempotency_key="burst").enqueue("same")
                seen.append(("dup" if r.duplicate else "new", r.id))
            except IdempotencyInProgress as exc:
                seen.append(("busy", exc.task_id))

    threads = [threading.Thread(target=submit) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(seen) == 160
    assert [kind for kind, _ in seen].count("new") == 1
    assert len({task_id for _, task_id in seen}) == 1
    assert dtq_env.client.zcard(keys().index("tests", "QUEUED")) == 1
    assert dtq_env.stats()["submitted"] == 1


def test_key_records_expire_idempotency_ttl_after_their_task_finished(dtq_env):
    dtq_env.configure(IDEMPOTENCY_TTL=1)
    first = tasks.record.using(idempotency_key="short").enqueue()
    idem = keys().idempotency("tests", "short")
    assert dtq_env.client.ttl(idem) == -1  # kept while the task is unfinished
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "success", data=None)
    assert 0 < dtq_env.client.ttl(idem) <= 1
    wait_for(lambda: not dtq_env.client.exists(idem), timeout=5)
    second = tasks.record.using(idempotency_key="short").enqueue()
    assert second.id != first.id and not second.duplicate


def test_the_reaper_settles_the_key_its_stream_entry_names(dtq_env):
    # The reaper takes the key from the entry it settles ('i'), without reading the record.
    from dtq.engine.reaper import Reaper

    first = tasks.record.using(idempotency_key="lost-worker", max_attempts=1).enqueue()
    claim_by_hand(worker="ghost")  # reads and claims, then never heartbeats
    dtq_env.client.zadd(keys().workers, {"ghost": 0})  # its heartbeat stopped long ago
    dtq_env.client.hset(keys().task(first.id), "lease", 0)  # and its lease ran out
    assert Reaper().settle_dead_consumers() == 1
    assert dtq.TaskResult.load(first.id).state == "DEAD_LETTERED"
    assert dtq_env.client.hget(keys().idempotency("tests", "lost-worker"), "state") == "failed"


# ----- idempotent_operation, in this process ---------------------------------------------


def counter():
    calls: list[int] = []

    def fn() -> object:
        calls.append(1)
        return {"n": len(calls), "t": (1, 2)}

    return calls, fn


def test_operation_runs_once_and_returns_the_stored_result(dtq_env):
    calls, fn = counter()
    first = dtq.idempotent_operation("op-a", fn)
    second = dtq.idempotent_operation("op-a", fn)
    assert first == second == {"n": 1, "t": [1, 2]}  # every caller gets the JSON round trip
    assert len(calls) == 1
    assert 0 < dtq_env.client.ttl(keys().operation("op-a")) <= 86400


def test_failure_releases_the_key(dtq_env):
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("gateway down")
        return "charged"

    with pytest.raises(ConnectionError):
        dtq.idempotent_operation("op-b", flaky)
    assert not dtq_env.client.exists(keys().operation("op-b"))
    assert dtq.idempotent_operation("op-b", flaky) == "charged"
    assert dtq.idempotent_operation("op-b", flaky) == "charged"
    assert len(calls) == 2


def test_second_caller_is_told_to_retry_while_the_first_runs(dtq_env):
    started, release = threading.Event(), threading.Event()
    results: list[object] = []

    def slow() -> str:
        started.set()
        release.wait(10)
        return "done"

    thread = threading.Thread(
        target=lambda: results.append(dtq.idempotent_operation("op-c", slow, lease=0.6))
    )
    thread.start()
    started.wait(5)
    time.sleep(0.9)  # longer than the lease: only the renewal keeps the key held
    with pytest.raises(dtq.OperationInProgress) as info:
        dtq.idempotent_operation("op-c", lambda: "second", lease=0.6)
    assert isinstance(info.value, dtq.RetryableError)
    assert 0 < info.value.delay <= 0.6
    release.set()
    thread.join(5)
    assert results == ["done"]
    assert dtq.idempotent_operation("op-c", slow) == "done"


def test_a_holder_that_stops_renewing_frees_the_key_after_its_lease(dtq_env):
    from dtq.engine.idempotency import _Operation

    dead = _Operation("op-d", lease=0.2)
    assert dead.begin() == ["acquired"]  # ...and its process dies: nobody renews or finishes
    _, fn = counter()
    with pytest.raises(dtq.OperationInProgress):
        dtq.idempotent_operation("op-d", fn)
    wait_for(lambda: not dtq_env.client.exists(keys().operation("op-d")), timeout=3)
    assert dtq.idempotent_operation("op-d", fn)["n"] == 1


def test_a_late_finisher_gets_the_first_stored_result(dtq_env):
    from dtq.engine.idempotency import _Operation

    slow = _Operation("op-e", lease=0.1)
    assert slow.begin() == ["acquired"]
    wait_for(lambda: not dtq_env.client.exists(keys().operation("op-e")), timeout=3)
    assert dtq.idempotent_operation("op-e", lambda: "fast") == "fast"
    assert slow.store('"slow"', 60) == '"fast"'


def test_unserializable_result_is_permanent_and_releases_the_key(dtq_env):
    with pytest.raises(dtq.PermanentError, match="JSON"):
        dtq.idempotent_operation("op-f", lambda: {1, 2})
    assert not dtq_env.client.exists(keys().operation("op-f"))


def test_stored_result_expires_after_its_ttl(dtq_env):
    _, fn = counter()
    dtq.idempotent_operation("op-g", fn, ttl=1)
    wait_for(lambda: not dtq_env.client.exists(keys().operation("op-g")), timeout=5)
    assert dtq.idempotent_operation("op-g", fn)["n"] == 2


def test_operation_keys_are_validated(dtq_env):
    with pytest.raises(ValueError, match="operation key"):
        dtq.idempotent_operation("has space", lambda: 1)


# ----- idempotent_operation in real workers ----------------------------------------------


def finished(result):
    def check():
        result.refresh()
        return result.is_finished

    return check


@pytest.mark.slow
def test_operation_that_fails_once_runs_twice_and_is_stored_once(dtq_env):
    result = tasks.op_flaky.enqueue("pay-1")
    dtq_env.worker("--with-scheduler")
    wait_for(finished(result))
    assert result.state == dtq.TaskState.SUCCEEDED
    assert result.attempt == 3  # 1: operation failed; 2: it succeeded, task failed; 3: replay
    assert [r["attempt"] for r in dtq_env.witnessed("op_flaky.fn")] == [1, 2]
    assert result.return_value == {"charged_on_attempt": 2}


@pytest.mark.slow
def test_crash_between_the_operation_and_its_record_reruns_it(dtq_env):
    result = tasks.op_once.enqueue("ship-1")
    first = dtq_env.worker(failpoints="idempotency.after_fn@1")
    assert first.wait(30) == -9  # killed after the function ran, before its result was stored
    assert [r["attempt"] for r in dtq_env.witnessed("op_once.fn")] == [1]
    dtq_env.worker("--with-reaper", "--with-scheduler")
    wait_for(finished(result))
    assert result.state == dtq.TaskState.SUCCEEDED
    assert [r["attempt"] for r in dtq_env.witnessed("op_once.fn")] == [1, 2]  # at least once
    assert result.return_value == {"ran_on_attempt": 2}
    assert dtq.idempotent_operation("ship-1", lambda: "never") == {"ran_on_attempt": 2}
