"""Bulk actions by filter: the dry-run count is what the background job does, in one audit row."""

from __future__ import annotations

import pytest

import dtq
from dtq.engine import bulk_jobs
from dtq.engine.errors import InvalidOperation
from dtq.engine.read_side.budget import read_budget
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import ACTOR, claim_by_hand, dead_letter_by_hand, finalize_by_hand
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def state(task_id: str) -> str:
    return dtq.TaskResult.load(task_id).state


def run(plan: bulk_jobs.Plan) -> dict:
    """Start a planned job and wait until its thread has finished it."""
    bulk_jobs.start(plan.job_id, actor=ACTOR, reason="incident 7")

    def finished() -> bool:
        job = bulk_jobs.progress(plan.job_id)
        return job is not None and job["state"] == "finished"

    wait_for(finished, timeout=30)
    job = bulk_jobs.progress(plan.job_id)
    assert job is not None
    return job


def test_retry_by_query_replays_what_the_dry_run_counted_in_one_audit_row(dtq_env):
    for i in range(5):
        tasks.record.enqueue(i)
    dead = dead_letter_by_hand(3)  # two stay QUEUED
    plan = bulk_jobs.plan("retry", query="queue:tests")
    assert plan.count == 3 and not plan.more
    assert AuditEntry.objects.count() == 0  # a dry run is not an action
    job = run(plan)
    assert (job["count"], job["done"], job["skipped"], job["outcome"]) == (3, 3, 0, "ok")
    assert {state(t) for t in dead} == {dtq.TaskState.QUEUED}
    row = AuditEntry.objects.get()
    assert (row.action, row.outcome, row.affected, row.reason) == ("replay", "ok", 3, "incident 7")
    assert row.parameters["filter"] == "queue:tests"
    assert row.parameters["count"] == 3 and row.parameters["done"] == 3


def test_failed_tasks_without_a_dlq_entry_are_retried_from_their_records(dtq_env):
    failed = tasks.record.enqueue().id
    (claimed,) = claim_by_hand()
    assert finalize_by_hand(claimed, "fail", use_dlq=False) == 1
    assert state(failed) == dtq.TaskState.FAILED
    (dead,) = (tasks.record.enqueue().id, *dead_letter_by_hand(1))[1:]
    plan = bulk_jobs.plan("retry", query="")
    assert (plan.count, plan.skipped) == (2, {})
    assert run(plan)["done"] == 2
    assert state(dead) == state(failed) == dtq.TaskState.QUEUED


def test_cancel_ticked_rows_skips_finished_ones(dtq_env):
    waiting = [tasks.record.enqueue(i).id for i in range(3)]
    done = tasks.record.enqueue("done").id
    plan = bulk_jobs.plan("cancel", task_ids=[*waiting, done])
    assert plan.count == 4  # all still queued
    (claimed,) = claim_by_hand()  # the oldest starts running meanwhile: cancel asks it to stop
    finalize_by_hand(claimed, "success", data=1)  # ...and it finished first: skipped
    job = run(plan)
    assert (job["count"], job["done"], job["skipped"]) == (4, 3, 1)
    row = AuditEntry.objects.get()
    assert (row.action, row.affected, row.parameters["filter"]) == ("cancel", 3, "ticked rows")


def test_discard_by_query_and_a_job_starts_once(dtq_env):
    tasks.record.enqueue(1)
    (dead,) = dead_letter_by_hand(1)
    plan = bulk_jobs.plan("discard", query="args.0=1")
    assert plan.count == 1
    job = run(plan)
    assert job["done"] == 1
    with pytest.raises(InvalidOperation, match="already started"):
        bulk_jobs.start(plan.job_id, actor=ACTOR)
    assert AuditEntry.objects.get().action == "discard"
    assert state(dead) == dtq.TaskState.DEAD_LETTERED


def test_bad_input_is_refused_clearly(dtq_env):
    with pytest.raises(InvalidOperation, match="unknown bulk action"):
        bulk_jobs.plan("explode", query="")
    with pytest.raises(InvalidOperation, match="bad query"):
        bulk_jobs.plan("cancel", query="attempt>=x")
    with pytest.raises(InvalidOperation, match="invalid task id"):
        bulk_jobs.plan("cancel", task_ids=["nope"])


def test_the_admin_lists_separate_filters_narrow_the_query(dtq_env):
    tasks.record.enqueue(1)
    tasks.record.using(queue_name="other").enqueue(1)
    plan = bulk_jobs.plan("cancel", query="args.0=1", narrow={"queue": "other", "state": ""})
    assert plan.count == 1
    job = run(plan)
    assert job["query"] == "args.0=1 [queue=other]" and job["done"] == 1
    assert AuditEntry.objects.get().parameters["filter"] == "args.0=1 [queue=other]"
    with pytest.raises(InvalidOperation, match="bad query"):
        bulk_jobs.plan("cancel", narrow={"state": "NOPE"})


def test_a_dry_run_stays_within_the_read_budget_and_says_more(dtq_env, settings):
    for i in range(300):
        tasks.record.enqueue(i)
    settings.DTQ = {**settings.DTQ, "READ_BUDGET": 100}
    with read_budget() as budget:  # as inside one API request or admin page
        plan = bulk_jobs.plan("cancel", query="queue:tests")
    assert plan.more and 0 < plan.count < 300
    assert budget.spent <= 100
    done = run(plan)["done"]
    assert done == plan.count
    while plan.more:  # the rest: plan again afterwards, until nothing more matches
        plan = bulk_jobs.plan("cancel", query="queue:tests")
        done += run(plan)["done"]
    assert done == 300 and bulk_jobs.plan("cancel", query="queue:tests").count == 0
    assert AuditEntry.objects.filter(outcome="ok").count() == AuditEntry.objects.count()


def test_a_discard_leaves_failed_tasks_out(dtq_env):
    tasks.record.enqueue()
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "fail", use_dlq=False)
    assert bulk_jobs.plan("discard", query="").skipped == {}  # FAILED is not read for a discard
    assert bulk_jobs.plan("discard", task_ids=[claimed["id"]]).skipped == {"state FAILED": 1}
