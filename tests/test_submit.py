"""Submitting tasks: records, validation, limits."""

from datetime import timedelta

import pytest

import dtq
from dtq.engine.errors import InvalidTaskError, PayloadError, SubmitError
from tests.testapp import tasks


def test_enqueue_creates_a_queued_record(dtq_env):
    result = tasks.record.enqueue(41)
    assert len(result.id) == 22
    result.refresh()
    assert result.state == dtq.TaskState.QUEUED
    assert result.attempt == 0
    assert result.record["payload"] == {"args": [41], "kwargs": {}}
    keys = dtq_env.keys_of(result.id)
    assert dtq_env.client_of(keys).xlen(keys.stream("tests", 1)) == 1


def test_delayed_task_waits_in_the_schedule(dtq_env):
    result = tasks.record.using(run_after=timedelta(seconds=30)).enqueue()
    result.refresh()
    assert result.state == dtq.TaskState.PENDING
    keys = dtq_env.keys_of(result.id)
    assert dtq_env.client_of(keys).zscore(keys.schedule, result.id) is not None


def test_arguments_must_be_json(dtq_env):
    with pytest.raises(PayloadError, match="JSON-serializable"):
        tasks.record.enqueue(object())


def test_payload_size_is_limited(dtq_env):
    dtq_env.configure(MAX_PAYLOAD_BYTES=100)
    with pytest.raises(PayloadError, match="limit is 100"):
        tasks.record.enqueue("x" * 200)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"priority": 101}, "priority"),
        ({"queue_name": "bad name"}, "invalid queue name"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": -1}, "timeout"),
    ],
)
def test_invalid_options_are_refused(dtq_env, options, message):
    with pytest.raises(InvalidTaskError, match=message):
        tasks.record.using(**options)


def test_using_rejects_unknown_options():
    with pytest.raises(TypeError, match="bogus"):
        tasks.record.using(bogus=1)


def test_bad_idempotency_key_is_refused(dtq_env):
    with pytest.raises(SubmitError, match="idempotency_key"):
        tasks.record.using(idempotency_key="has space").enqueue()


def test_naive_run_after_is_refused(dtq_env):
    from datetime import datetime

    with pytest.raises(InvalidTaskError, match="aware"):
        tasks.record.using(run_after=datetime(2030, 1, 1)).enqueue()


def test_unknown_task_id_raises_not_found(dtq_env):
    with pytest.raises(dtq.TaskNotFound):
        dtq.TaskResult.load("0" * 22)


def test_new_ids_carry_time_and_shard_and_sort_by_creation():
    import time

    from dtq.engine import ids

    first = ids.new_id(0)
    time.sleep(0.002)
    later = ids.new_id(1023)
    assert ids.is_valid(first) and ids.is_valid(later)
    assert first < later
    assert (ids.shard_of(first), ids.shard_of(later)) == (0, 1023)
    assert abs(ids.created_ms(later) - time.time() * 1000) < 1000


def test_ids_made_at_once_in_threads_and_in_a_forked_child_never_repeat():
    import os
    import threading
    import warnings

    from dtq.engine import ids

    made: list[str] = []
    ids.new_id()  # the parent holds draws a child would reuse if it kept them
    workers = [
        threading.Thread(target=lambda: made.extend(ids.new_id() for _ in range(2000)))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    read, write = os.pipe()
    with warnings.catch_warnings():  # other tests' threads may live on: the child only writes
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, " ".join(ids.new_id() for _ in range(300)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    parent = [ids.new_id() for _ in range(300)]
    random_parts = [i[12:] for i in made + child + parent]
    assert len(child) == 300
    assert len(set(random_parts)) == len(random_parts)
