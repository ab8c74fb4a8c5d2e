"""Contract tests of the queue endpoints: overview, detail, pause, resume, purge (audited)."""

from __future__ import annotations

import pytest

from dtq.models import AuditEntry
from tests.test_api_support import api, assert_error, post, submit  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "submit", "pause", "purge")


def test_queue_list_shows_every_queue(client):
    submit(client)
    submit(client, queue_name="other", delay=60)
    queues = {q["name"]: q for q in client.get("/api/queues/").json()["results"]}
    assert set(queues) == {"tests", "other"}
    assert queues["tests"]["queued"] == 1 and queues["tests"]["depth"] == [0, 1, 0]
    assert queues["other"]["scheduled"] == 1 and queues["other"]["queued"] == 0
    assert queues["tests"]["counters"]["submitted"] == 1


def test_queue_detail_has_bands_counts_age_and_throughput(client):
    submit(client, priority=90)
    submit(client)
    detail = client.get("/api/queues/tests/", {"minutes": 5}).json()
    assert detail["depth"] == [1, 1, 0] and detail["waiting"] == [1, 1, 0]
    assert detail["running"] == 0 and detail["scheduled"] == 0 and detail["dlq"] == 0
    assert detail["paused"] is False
    assert detail["oldest_waiting_age"] >= 0
    assert len(detail["throughput"]) == 5
    assert sum(row["submitted"] for row in detail["throughput"]) == 2


def test_unknown_queue_is_404_and_bad_name_is_400(client):
    assert_error(client.get("/api/queues/nothing/"), 404, "not_found")
    assert_error(client.get("/api/queues/bad%20name/"), 400, "invalid")
    submit(client)
    assert_error(client.get("/api/queues/tests/", {"minutes": 0}), 400, "invalid")


def test_pause_and_resume_are_audited(client):
    submit(client)
    response = post(client, "/api/queues/tests/pause/", {"reason": "deploy"})
    assert response.json() == {"queue": "tests", "paused": True, "changed": True}
    assert client.get("/api/queues/tests/").json()["paused"] is True
    again = post(client, "/api/queues/tests/pause/").json()
    assert again["changed"] is False
    resumed = post(client, "/api/queues/tests/resume/").json()
    assert resumed == {"queue": "tests", "paused": False, "changed": True}
    rows = list(AuditEntry.objects.order_by("id"))
    assert [r.action for r in rows] == ["pause", "pause", "resume"]
    first = rows[0]
    assert first.actor == client.user and first.source == "api"
    assert first.queue == "tests" and first.reason == "deploy" and first.outcome == "ok"
    assert first.client_address == "203.0.113.7" and len(first.request_id) == 32


def test_request_id_header_is_used_for_the_audit_row(client):
    submit(client)
    response = post(client, "/api/queues/tests/pause/", HTTP_X_REQUEST_ID="req-42")
    assert response["X-Request-ID"] == "req-42"
    assert AuditEntry.objects.get().request_id == "req-42"


def test_purge_needs_a_reason(client):
    submit(client)
    error = assert_error(post(client, "/api/queues/tests/purge/", {}), 400, "invalid")
    assert "reason" in error["details"]["fields"]
    assert_error(post(client, "/api/queues/tests/purge/", {"reason": "  "}), 400)
    assert not AuditEntry.objects.exists()


def test_purge_dry_run_only_counts(client):
    submit(client)
    submit(client, delay=60)
    response = post(client, "/api/queues/tests/purge/", {"reason": "check", "dry_run": True})
    assert response.json() == {
        "queue": "tests",
        "dry_run": True,
        "queued": 1,
        "scheduled": 1,
        "running": 0,
        "purged": 2,
        "more": False,
        "next_cursor": None,
    }
    assert client.get("/api/queues/tests/").json()["queued"] == 1
    assert not AuditEntry.objects.exists()  # a dry run changes nothing, so it audits nothing


def test_purge_cancels_waiting_tasks_and_is_audited(client):
    ids = [submit(client)["id"], submit(client, delay=60)["id"]]
    response = post(client, "/api/queues/tests/purge/", {"reason": "bad batch"})
    assert response.status_code == 200
    assert response.json()["purged"] == 2 and response.json()["dry_run"] is False
    for task_id in ids:
        assert client.get(f"/api/tasks/{task_id}/").json()["state"] == "CANCELLED"
    row = AuditEntry.objects.get()
    assert (row.action, row.reason, row.affected, row.outcome) == ("purge", "bad batch", 2, "ok")
    assert row.actor == client.user


def test_queues_show_wait_and_run_percentiles(client, dtq_env):
    empty = {"p50": None, "p95": None, "count": 0}
    submit(client)
    listed = client.get("/api/queues/").json()["results"][0]
    assert listed["percentiles"] == {"wait": empty, "run": empty}
    for _ in range(3):
        submit(client)
    dtq_env.worker("--burst").wait(30)
    detail = client.get("/api/queues/tests/").json()["percentiles"]
    assert detail["wait"]["count"] == detail["run"]["count"] == 4
    for kind in ("wait", "run"):
        assert 0 <= detail[kind]["p50"] <= detail[kind]["p95"] <= 300
