"""Retry FAILED tasks (no DLQ entry): retry_failed.lua, edit-and-retry, the API, bulk retry."""

from __future__ import annotations

from typing import Any

import pytest

from dtq.engine import bulk_jobs, failed, read_side
from dtq.engine.edit import edit_and_retry
from dtq.engine.errors import InvalidTaskError, NotRetryable, TaskNotFound
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import (
    ACTOR,
    claim_by_hand,
    dead_letter_by_hand,
    events,
    fail_by_hand,
    finalize_by_hand,
    orphans,
)
from tests.test_api_support import api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def failed_task(*args: Any, **options: Any) -> str:
    task = tasks.record.using(**options) if options else tasks.record
    task_id = task.enqueue(*args).id
    assert fail_by_hand(1) == [task_id]
    assert read_side.get_task(task_id)["state"] == "FAILED"  # type: ignore[index]
    return task_id


def state(task_id: str) -> str:
    return read_side.get_task(task_id)["state"]  # type: ignore[index]


def test_the_edit_is_retried_run_and_audited_before_and_after(dtq_env: Any) -> None:
    task_id = failed_task(1)
    status = edit_and_retry(task_id, actor=ACTOR, args=[2], priority=60, reason="typo")
    assert status == "retried"
    record = read_side.get_task(task_id)
    assert record is not None and record["state"] == "QUEUED" and record["attempt"] == 0
    assert record["payload"] == {"args": [2], "kwargs": {}}
    assert (record["priority"], record["band"]) == (60, 0)
    assert record["finished_at"] is None and record["history"][-1]["outcome"] == "retried"
    assert dtq_env.client.ttl(dtq_env.keys.task(task_id)) == -1  # no retention TTL while live
    row = AuditEntry.objects.get()
    assert (row.action, row.outcome, row.affected, row.reason) == ("replay", "ok", 1, "typo")
    assert row.parameters["state"] == "FAILED" and row.parameters["outcome"] == "retried"
    edit = row.parameters["edit"]
    assert edit["before"] == {"args": [1], "kwargs": {}, "queue": "tests", "priority": 0}
    assert edit["after"] == {"args": [2], "kwargs": {}, "queue": "tests", "priority": 60}
    assert len(events(dtq_env.client, "TASK_RETRIED", task_id)) == 1
    assert orphans(dtq_env.client) == []
    dtq_env.worker("--burst").wait(30)
    wait_for(lambda: state(task_id) == "SUCCEEDED")
    assert read_side.get_task(task_id)["result"] == 2  # type: ignore[index]
    assert dtq_env.stats()["active"] == 0  # counted in again by the retry, out at its end


def test_a_plain_retry_and_a_retry_into_another_queue(dtq_env: Any) -> None:
    same, moved = failed_task(1), failed_task(2)
    assert edit_and_retry(same, actor=ACTOR) == "retried"
    assert read_side.get_task(same)["payload"] == {"args": [1], "kwargs": {}}  # type: ignore[index]
    assert edit_and_retry(moved, actor=ACTOR, queue="other") == "retried"
    record = read_side.get_task(moved)
    assert record is not None and (record["queue"], record["state"]) == ("other", "QUEUED")
    k = dtq_env.keys
    assert dtq_env.client.zscore(k.index("tests", "FAILED"), moved) is None
    assert dtq_env.client.zscore(k.index("other", "QUEUED"), moved) is not None
    assert orphans(dtq_env.client, "other") == [] and orphans(dtq_env.client) == []


def test_the_same_call_received_twice_retries_once(dtq_env: Any) -> None:
    task_id = failed_task(1)
    (found,) = failed.find([task_id])
    edit = '{"payload": "{\\"args\\":[5],\\"kwargs\\":{}}", "priority": 0, "band": 1}'
    assert failed.retry("tests", [found], None, [edit]) == ["retried"]
    assert failed.retry("tests", [found], None, [edit]) == ["retried"]  # the resend: no change
    k = dtq_env.keys
    assert dtq_env.client.xlen(k.stream("tests", 1)) == 1  # one new delivery
    assert len(events(dtq_env.client, "TASK_RETRIED", task_id)) == 1
    history = read_side.get_task(task_id)["history"]  # type: ignore[index]
    assert [h["outcome"] for h in history].count("retried") == 1
    # The new run fails again: a late resend of the first call still changes nothing...
    assert fail_by_hand(1) == [task_id]
    assert failed.retry("tests", [found], None, [edit]) == ["retried"]
    assert state(task_id) == "FAILED"
    # ...while a retry of this new failure (a new fence) runs it again.
    assert failed.retry("tests", failed.find([task_id])) == ["retried"]
    assert state(task_id) == "QUEUED"


def test_a_changed_or_missing_task_is_not_retried(dtq_env: Any) -> None:
    task_id = failed_task(1)
    (found,) = failed.find([task_id])
    wrong = failed.FailedTask(task_id, "tests", "1")  # another failure than the one read
    assert failed.retry("tests", [wrong]) == ["stale"]
    elsewhere = failed.FailedTask(task_id, "other", found.finished_at)
    assert failed.retry("other", [elsewhere]) == ["stale"]  # not that queue's task
    gone = failed.FailedTask("0" * 22, "tests", "1")
    assert failed.retry("tests", [gone]) == ["missing"]
    assert state(task_id) == "FAILED"
    assert failed.find([task_id, "0" * 22, "bad id"]) == [found]


def test_only_failed_tasks_are_retried(dtq_env: Any) -> None:
    tasks.record.enqueue(1)
    (dead,) = dead_letter_by_hand(1)
    queued = tasks.record.enqueue(2).id
    with pytest.raises(NotRetryable, match="is QUEUED, not FAILED"):
        edit_and_retry(queued, actor=ACTOR)
    with pytest.raises(NotRetryable, match="replay its DLQ entry instead"):
        edit_and_retry(dead, actor=ACTOR)
    with pytest.raises(TaskNotFound):
        edit_and_retry("0" * 22, actor=ACTOR)
    assert [r.outcome for r in AuditEntry.objects.all()] == ["refused"] * 3


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"args": [1, 2]}, "arguments do not fit"),
        ({"priority": 101}, "between -100 and 100"),
        ({"queue": "not-accepted"}, "accepts only"),
    ],
)
def test_a_bad_edit_changes_nothing(dtq_env: Any, change: dict[str, Any], says: str) -> None:
    task_id = failed_task(1)
    with pytest.raises(InvalidTaskError, match=says):
        edit_and_retry(task_id, actor=ACTOR, **change)
    record = read_side.get_task(task_id)
    assert record is not None and record["state"] == "FAILED"
    assert record["payload"] == {"args": [1], "kwargs": {}}
    assert AuditEntry.objects.get().outcome == "refused"


def test_the_idempotency_key_follows_the_task_in_its_queue_and_is_released_elsewhere(
    dtq_env: Any,
) -> None:
    kept = failed_task(1, idempotency_key="k1")
    moved = failed_task(2, idempotency_key="k2")
    k = dtq_env.keys
    edit_and_retry(kept, actor=ACTOR)
    assert dtq_env.client.hget(k.idempotency("tests", "k1"), "state") == "processing"
    edit_and_retry(moved, actor=ACTOR, queue="other")
    assert not dtq_env.client.exists(k.idempotency("tests", "k2"))
    assert read_side.get_task(moved)["idem"] == ""  # type: ignore[index]


def test_the_api_retries_a_failed_task(dtq_env: Any, api: Any) -> None:  # noqa: F811
    task_id = failed_task(1)
    url = f"/api/tasks/{task_id}/retry/"
    assert post(api.client("view"), url, {}).status_code == 403
    client = api.client("view", "replay")
    assert_error(post(client, url, {"args": [1, 2, 3]}), 400, "invalid")
    response = post(client, url, {"args": [3], "priority": 10, "reason": "fixed"})
    assert response.status_code == 200, response.content
    assert response.json() == {"task_id": task_id, "outcome": "retried"}
    assert read_side.get_task(task_id)["payload"]["args"] == [3]  # type: ignore[index]
    refused = post(client, url, {})  # QUEUED now
    assert_error(refused, 409, "not_retryable")
    assert refused.json()["error"]["details"] == {"task_id": task_id, "state": "QUEUED"}
    assert_error(post(client, f"/api/tasks/{'0' * 22}/retry/", {}), 404, "task_not_found")


def test_bulk_retry_takes_failed_and_dead_lettered_tasks(dtq_env: Any) -> None:
    for i in range(4):
        tasks.record.enqueue(i)
    failed_ids = fail_by_hand(2)
    dead_ids = dead_letter_by_hand(1)
    (claimed,) = claim_by_hand()  # the last one succeeds: not retried
    finalize_by_hand(claimed, "success", data=1)
    plan = bulk_jobs.plan("retry", query="queue:tests")
    assert (plan.count, plan.skipped) == (3, {})
    bulk_jobs.start(plan.job_id, actor=ACTOR, reason="incident 8")

    def finished() -> bool:
        job = bulk_jobs.progress(plan.job_id)
        return job is not None and job["state"] == "finished"

    wait_for(finished, timeout=30)
    job = bulk_jobs.progress(plan.job_id)
    assert job is not None and (job["done"], job["skipped"], job["outcome"]) == (3, 0, "ok")
    assert {state(t) for t in [*failed_ids, *dead_ids]} == {"QUEUED"}
    row = AuditEntry.objects.get()
    assert (row.action, row.affected, row.parameters["count"]) == ("replay", 3, 3)
    ticked = bulk_jobs.plan("retry", task_ids=[claimed["id"]])
    assert (ticked.count, ticked.skipped) == (0, {"state SUCCEEDED": 1})
