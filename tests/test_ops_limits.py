"""Backpressure, submission limits, and the bounded attempt history."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import dtq
from dtq.engine import codec
from dtq.engine.errors import InvalidTaskError, PayloadError, SubmitError
from dtq.engine.executor import MAX_MESSAGE, MAX_TRACEBACK, Attempt, failure
from dtq.engine.scheduler import Scheduler
from dtq.engine.submit import Submission, submit
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand, finalize_by_hand, keys
from tests.testapp import tasks

# ----- backpressure ----------------------------------------------------------------------


def test_full_queue_refuses_with_retry_after_and_counts_scheduled_tasks(dtq_env):
    dtq_env.configure(MAX_QUEUE_DEPTH=3)
    tasks.record.enqueue(1)
    tasks.record.enqueue(2)
    tasks.record.using(run_after=timedelta(hours=1)).enqueue(3)  # scheduled tasks count too
    with pytest.raises(dtq.QueueFull) as info:
        tasks.record.enqueue(4)
    assert (info.value.queue, info.value.limit) == ("tests", 3)
    assert info.value.retry_after >= 1
    assert dtq_env.stats()["active"] == 3
    assert dtq_env.stats()["submitted"] == 3  # the refused one wrote nothing


def test_finished_tasks_free_their_place(dtq_env):
    dtq_env.configure(MAX_QUEUE_DEPTH=1)
    tasks.record.enqueue(1)
    with pytest.raises(dtq.QueueFull):
        tasks.record.enqueue(2)
    (claimed,) = claim_by_hand()  # running tasks still count
    with pytest.raises(dtq.QueueFull):
        tasks.record.enqueue(2)
    finalize_by_hand(claimed, "success", data=1)
    assert dtq_env.stats()["active"] == 0
    tasks.record.enqueue(2)


def test_per_queue_limit_overrides_the_default(dtq_env):
    dtq_env.configure(MAX_QUEUE_DEPTH=0, QUEUE_MAX_DEPTH={"tests": 1})
    tasks.record.enqueue()
    with pytest.raises(dtq.QueueFull):
        tasks.record.enqueue()
    for _ in range(3):
        tasks.record.using(queue_name="other").enqueue()  # unlimited


def test_retrying_tasks_count_against_the_limit(dtq_env):
    dtq_env.configure(MAX_QUEUE_DEPTH=1)
    tasks.record.enqueue()
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "retry", delay_ms=60_000)
    with pytest.raises(dtq.QueueFull):
        tasks.record.enqueue()


# ----- limits checked before anything is written -----------------------------------------


def test_payload_limit_is_inclusive(dtq_env):
    size = len(codec.encode_payload(["x" * 50], {}, 0))
    dtq_env.configure(MAX_PAYLOAD_BYTES=size)
    tasks.record.enqueue("x" * 50)
    with pytest.raises(PayloadError, match=f"limit is {size}"):
        tasks.record.enqueue("x" * 51)


@pytest.mark.parametrize(
    "changes, error, message",
    [
        ({"name": "n" * 201}, InvalidTaskError, "task name"),
        ({"name": ""}, InvalidTaskError, "task name"),
        ({"idempotency_key": "k" * 201}, SubmitError, "idempotency_key"),
        ({"idempotency_key": "bad key"}, SubmitError, "idempotency_key"),
        ({"delay": 366 * 86400 + 1}, SubmitError, "delay"),
        ({"delay": -1}, SubmitError, "delay"),
        ({"ttl": 0}, InvalidTaskError, "ttl"),
        ({"queue": "x" * 65}, InvalidTaskError, "queue name"),
    ],
)
def test_limits_are_refused_before_any_write(dtq_env, changes, error, message):
    sub = Submission(**{"name": "tests.testapp.tasks.record", "queue": "tests", **changes})
    with pytest.raises(error, match=message):
        submit(sub)
    assert dtq_env.client.keys(f"{dtq_env.prefix}:*") == []


def test_limit_edges_are_accepted(dtq_env):
    dtq_env.configure(QUEUES=["tests", "q" * 64])  # a declared 64-character name
    submit(Submission(name="n" * 200, queue="q" * 64, idempotency_key="k" * 200))
    submit(Submission(name="n", queue="tests", delay=366 * 86400))


# ----- attempt history -------------------------------------------------------------------


def _huge_failure(attempt: int, task_id: str) -> str:
    """A real history entry for an error with a huge non-ASCII message and deep traceback."""

    def recurse(n: int) -> None:
        if n == 0:
            raise ValueError('ünïcödé ☃ 😀 "quotes" \\ ' * 5000)
        recurse(n - 1)

    att = Attempt(task_id, "0-1", 1, 1, "t", "{}", attempt, 1000, None, "{}", "")
    try:
        recurse(100)
    except ValueError as exc:
        return failure(att, "w1", exc, retryable=True).history
    raise AssertionError("unreachable")


def test_history_stays_bounded_and_valid_json(dtq_env):
    result = tasks.record.using(max_attempts=1000).enqueue()
    for attempt in range(1, 106):
        (claimed,) = claim_by_hand()
        assert claimed["attempt"] == attempt
        finalize_by_hand(claimed, "retry", history=_huge_failure(attempt, result.id))
        Scheduler().run_once()  # promote the retry (due at once)
    raw = dtq_env.client.hget(keys().task(result.id), "history")
    history = json.loads(raw)
    assert len(history) == 100  # the first hundred attempts are kept, later ones counted
    assert int(dtq_env.client.hget(keys().task(result.id), "history_n")) == 105
    for entry in history:
        assert len(entry["message"]) <= MAX_MESSAGE
        assert len(entry["traceback"]) <= MAX_TRACEBACK
        assert entry["message"].startswith("ünïcödé ☃ 😀")
    assert len(raw.encode()) < 100 * 4 * (MAX_MESSAGE + MAX_TRACEBACK + 500)


@pytest.mark.slow
def test_worker_records_a_huge_unicode_error_as_valid_json(dtq_env):
    result = tasks.huge_error.enqueue()
    dtq_env.worker("--with-scheduler")

    def finished():
        result.refresh()
        return result.is_finished

    wait_for(finished)
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert [h["outcome"] for h in result.history] == ["retry", "failed"]
    for entry in result.history:
        assert "ünïcödé ☃ 😀" in entry["message"]
        assert len(entry["message"]) <= MAX_MESSAGE
        assert len(entry["traceback"]) <= MAX_TRACEBACK
    assert result.error["class"] == "builtins.ValueError"
