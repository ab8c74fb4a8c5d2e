"""Bulk actions in the admin: tick rows or take the search, count first, then watch the job."""

from __future__ import annotations

import re

import pytest

import dtq
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import dead_letter_by_hand
from tests.test_admin_permissions import client_for, url
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def state(task_id: str) -> str:
    return dtq.TaskResult.load(task_id).state


def test_retry_everything_matching_the_search_counts_then_runs_with_progress(dtq_env):
    client = client_for("view", "replay")
    for i in range(4):
        tasks.record.enqueue(i)
    dead = dead_letter_by_hand(3)
    listing = client.get(url("tasks"), {"q": "queue:tests"}).content.decode()
    assert 'id="dtq-bulk"' in listing and 'value="retry"' in listing
    assert 'value="cancel"' not in listing  # no cancel permission, no cancel action
    form = {"action": "retry", "scope": "matching", "q": "queue:tests", "queue": "", "state": ""}
    confirm = client.post(url("bulk_plan"), form)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert re.search(r"Retry <strong>3</strong> tasks", page)
    assert not AuditEntry.objects.exists()  # the dry run did nothing
    job_id = re.search(r"/bulk/([0-9a-f]{32})/start/", page).group(1)
    started = client.post(url("bulk_start", job_id), {"reason": "fixed the bug"})
    assert started.status_code == 302 and started["Location"] == url("bulk_job", job_id)
    assert 'id="dtq-bulk-progress"' in client.get(url("bulk_job", job_id)).content.decode()

    def finished():
        job = client.get(url("bulk_job_json", job_id)).json()
        return job if job["state"] == "finished" else None

    job = wait_for(finished, timeout=30)
    assert (job["count"], job["done"], job["outcome"]) == (3, 3, "ok")
    assert {state(t) for t in dead} == {dtq.TaskState.QUEUED}
    row = AuditEntry.objects.get()
    assert (row.action, row.source, row.affected, row.reason) == (
        "replay",
        "admin",
        3,
        "fixed the bug",
    )
    assert row.parameters["filter"] == "queue:tests"


def test_cancel_ticked_rows_needs_the_cancel_permission(dtq_env):
    ids = [tasks.record.enqueue(i).id for i in range(2)]
    form = {"action": "cancel", "scope": "ticked", "task_id": ids}
    other = client_for("view", "replay")
    assert other.post(url("bulk_plan"), form).status_code == 403
    client = client_for("view", "cancel")
    page = client.post(url("bulk_plan"), form).content.decode()
    assert re.search(r"Cancel <strong>2</strong> tasks", page)
    job_id = re.search(r"/bulk/([0-9a-f]{32})/start/", page).group(1)
    assert other.post(url("bulk_start", job_id)).status_code == 403
    client.post(url("bulk_start", job_id))
    wait_for(lambda: client.get(url("bulk_job_json", job_id)).json()["state"] == "finished")
    assert {state(t) for t in ids} == {dtq.TaskState.CANCELLED}
    assert AuditEntry.objects.get().parameters["filter"] == "ticked rows"


def test_nothing_ticked_or_a_bad_search_says_so(dtq_env):
    client = client_for("view", "cancel")
    none = client.post(url("bulk_plan"), {"action": "cancel", "scope": "ticked"}, follow=True)
    assert "Tick tasks first" in none.content.decode()
    bad = {"action": "cancel", "scope": "matching", "q": "attempt>=x"}
    assert "bad query" in client.post(url("bulk_plan"), bad, follow=True).content.decode().lower()
    assert client.post(url("bulk_plan"), {"action": "explode"}).status_code == 404
    assert client.get(url("bulk_job_json", "0" * 32)).status_code == 404
