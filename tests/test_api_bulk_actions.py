"""Bulk actions through the API: dry run, start, progress; one audit row; bad input is 400."""

from __future__ import annotations

import pytest

from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.test_api_support import api, assert_error, dead_letter, post, task_state  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_retry_by_query_counts_then_does_exactly_that(api, dtq_env):  # noqa: F811
    client = api.client("view", "submit", "replay")
    dead = dead_letter(dtq_env, client, 3)
    planned = post(client, "/api/bulk/retry/", {"q": "queue:tests state:DEAD_LETTERED"})
    assert planned.status_code == 201, planned.content
    job = planned.json()["job"]
    assert (job["count"], job["state"], job["done"]) == (3, "planned", 0)
    assert not AuditEntry.objects.exists()  # the dry run did nothing
    started = post(client, "/api/bulk/retry/start/", {"job": job["id"], "reason": "fixed"})
    assert started.status_code == 202, started.content

    def finished():
        shown = client.get(f"/api/bulk/jobs/{job['id']}/").json()
        return shown if shown["state"] == "finished" else None

    shown = wait_for(finished, timeout=30)
    assert (shown["count"], shown["done"], shown["skipped"], shown["outcome"]) == (3, 3, 0, "ok")
    assert {task_state(client, t) for t in dead} == {"QUEUED"}
    row = AuditEntry.objects.get()
    assert (row.action, row.source, row.affected, row.outcome) == ("replay", "api", 3, "ok")
    assert row.parameters["filter"] == "queue:tests state:DEAD_LETTERED"
    again = post(client, "/api/bulk/retry/start/", {"job": job["id"]})
    assert "already started" in assert_error(again, 400)["message"]


def test_a_job_starts_only_under_its_own_action(api, dtq_env):  # noqa: F811
    client = api.client("view", "submit", "replay", "cancel")
    dead_letter(dtq_env, client, 1)
    job = post(client, "/api/bulk/discard/", {"q": ""})  # needs discard: refused
    assert_error(job, 403, "permission_denied")
    job_id = post(client, "/api/bulk/replay/", {"q": ""}).json()["job"]["id"]
    wrong = post(client, "/api/bulk/cancel/start/", {"job": job_id})
    assert "no planned cancel job" in assert_error(wrong, 400)["message"]


def test_bad_input_is_400_or_404(api, dtq_env):  # noqa: F811
    client = api.client("view", "cancel")
    both = post(client, "/api/bulk/cancel/", {"q": "x", "task_ids": ["a"]})
    assert "not both" in str(assert_error(both, 400)["details"])
    query = post(client, "/api/bulk/cancel/", {"q": "attempt>=x"})
    assert "bad query" in assert_error(query, 400)["message"]
    assert_error(post(client, "/api/bulk/cancel/start/", {"job": "nope"}), 400)
    assert_error(client.get("/api/bulk/jobs/nope/"), 404)
    assert_error(client.get(f"/api/bulk/jobs/{'0' * 32}/"), 404)
