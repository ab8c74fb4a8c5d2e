"""End-to-end runs through a real dtq_worker process."""

from datetime import timedelta

import pytest

import dtq
from dtq.engine.submit import Submission, submit
from tests.conftest import wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow


def finished(result):
    def check():
        result.refresh()
        return result.is_finished

    return check


def test_success_records_result_and_history(dtq_env):
    results = [tasks.record.enqueue(i) for i in range(5)]
    dtq_env.worker("--with-scheduler")
    for r in results:
        wait_for(finished(r))
        assert r.state == dtq.TaskState.SUCCEEDED
        assert r.attempt == 1
        assert r.history[0]["outcome"] == "succeeded"
    assert sorted(r.return_value for r in results) == list(range(5))
    assert len(dtq_env.witnessed("record")) == 5


def test_retryable_errors_retry_with_backoff_then_succeed(dtq_env):
    result = tasks.flaky.enqueue(2)
    dtq_env.worker("--with-scheduler")
    wait_for(finished(result))
    assert result.state == dtq.TaskState.SUCCEEDED
    assert result.return_value == 3
    assert [h["outcome"] for h in result.history] == ["retry", "retry", "succeeded"]
    assert result.history[0]["error"] == "dtq.RetryableError"


def test_exhausted_task_is_dead_lettered_with_its_error(dtq_env):
    result = tasks.poison.enqueue()
    dtq_env.worker("--with-scheduler")
    wait_for(finished(result))
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert result.attempt == 3
    assert result.error["class"] == "builtins.ValueError"
    assert "ValueError: poison" in result.history[-1]["traceback"]
    keys = dtq_env.keys_of(result.id)
    assert dtq_env.client_of(keys).xlen(keys.dlq("tests")) == 1


def test_dlq_disabled_means_failed(dtq_env):
    dtq_env.configure(DLQ_ENABLED=False)
    result = tasks.permanent.enqueue()
    dtq_env.worker()
    wait_for(finished(result))
    assert result.state == dtq.TaskState.FAILED


def test_permanent_error_is_not_retried(dtq_env):
    result = tasks.permanent.enqueue()
    dtq_env.worker()
    wait_for(finished(result))
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert result.attempt == 1


def test_unserializable_result_fails_permanently(dtq_env):
    result = tasks.unserializable.enqueue()
    dtq_env.worker()
    wait_for(finished(result))
    assert (result.state, result.attempt) == (dtq.TaskState.DEAD_LETTERED, 1)  # not retried
    # The real error, as the encoder raised it (not a dtq PermanentError that hides it).
    assert result.error == {
        "class": "builtins.TypeError",
        "message": "Type is not JSON serializable: set",
    }


def test_unknown_task_name_fails_permanently(dtq_env):
    accepted = submit(Submission(name="nobody.knows.me", queue="tests", max_attempts=3))
    result = dtq.TaskResult(id=accepted.id)
    dtq_env.worker()
    wait_for(finished(result))
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert result.attempt == 1
    assert "unknown task" in result.error["message"]


def test_undecodable_payload_fails_permanently(dtq_env):
    result = tasks.record.enqueue(1)
    keys = dtq_env.keys_of(result.id)
    dtq_env.client_of(keys).hset(keys.task(result.id), "payload", "{not json")
    dtq_env.worker()
    wait_for(finished(result))
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert "undecodable payload" in result.error["message"]
    assert dtq_env.witnessed("record") == []


def test_async_handler_runs_with_context(dtq_env):
    result = tasks.async_record.enqueue({"a": 1})
    dtq_env.worker()
    wait_for(finished(result))
    assert result.return_value == {"a": 1}
    assert dtq_env.witnessed("async_record")[0]["attempt"] == 1


@pytest.mark.parametrize("task", [tasks.async_slow, tasks.sync_slow])
def test_timeouts_fail_the_attempt(dtq_env, task):
    result = task.enqueue()
    dtq_env.worker()
    wait_for(finished(result))
    assert result.state == dtq.TaskState.DEAD_LETTERED
    assert result.error["class"] == "dtq.TaskTimeout"


def test_delayed_task_runs_after_its_time(dtq_env):
    result = tasks.record.using(run_after=timedelta(seconds=0.5)).enqueue("later")
    dtq_env.worker("--with-scheduler")
    wait_for(finished(result))
    assert result.record["started_at"] >= result.record["run_after"]


@pytest.mark.one_shard  # strict priority holds per shard
def test_strict_priority_between_bands(dtq_env):
    for i in range(10):
        tasks.priority_probe.using(priority=-50).enqueue(f"low{i}")
    for i in range(10):
        tasks.priority_probe.using(priority=0).enqueue(f"mid{i}")
    for i in range(10):
        tasks.priority_probe.using(priority=80).enqueue(f"high{i}")
    dtq_env.worker("--concurrency", "1", "--burst").wait(30)
    labels = [row["label"] for row in dtq_env.witnessed("priority")]
    assert [label[:-1].rstrip("0123456789") for label in labels] == ["high"] * 10 + ["mid"] * 10 + [
        "low"
    ] * 10


def test_burst_worker_exits_when_queue_is_empty(dtq_env):
    for i in range(20):
        tasks.record.enqueue(i)
    assert dtq_env.worker("--burst").wait(30) == 0
    assert len(dtq_env.witnessed("record")) == 20


def test_max_tasks_stops_the_worker(dtq_env):
    for i in range(10):
        tasks.record.enqueue(i)
    assert dtq_env.worker("--max-tasks", "3", "--concurrency", "1").wait(30) == 0
    assert len(dtq_env.witnessed("record")) == 3
