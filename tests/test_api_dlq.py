"""Contract tests of the DLQ endpoints: list, show, replay, discard, bulk replay, purge."""

from __future__ import annotations

import pytest

from dtq.models import AuditEntry
from tests.test_api_support import (  # noqa: F401
    PERMANENT,
    RECORD,
    api,
    assert_error,
    dead_letter,
    post,
    submit,
)

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)
UNKNOWN = "0000000000000000000000"


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "submit", "replay", "discard", "purge")


@pytest.mark.slow
def test_list_and_detail(api, client):  # noqa: F811
    ids = dead_letter(api.env, client, 3)
    page = client.get("/api/dlq/", {"limit": 2}).json()
    assert len(page["results"]) == 2
    assert page["total"] == 3 and page["next_cursor"]
    rest = client.get("/api/dlq/", {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert len(rest["results"]) == 1 and rest["next_cursor"] is None
    entries = page["results"] + rest["results"]
    assert {e["task_id"] for e in entries} == set(ids)
    # Newest first: the worker may dead-letter them in any order, the list follows the DLQ.
    stamps = [tuple(int(n) for n in e["entry_id"].split("-")) for e in entries]
    assert stamps == sorted(stamps, reverse=True)
    assert client.get("/api/dlq/", {"queue": "tests"}).json()["total"] == 3
    assert client.get("/api/dlq/", {"queue": "elsewhere"}).json()["results"] == []
    detail = client.get(f"/api/dlq/{ids[0]}/").json()
    assert detail["entry"]["name"] == PERMANENT and detail["entry"]["attempts"] == 1
    assert detail["entry"]["error"]["class"] == "dtq.PermanentError"
    assert detail["task"]["state"] == "DEAD_LETTERED" and detail["task"]["errors"]
    assert_error(client.get("/api/dlq/", {"cursor": "not-an-id"}), 400, "invalid_cursor")


def test_unknown_entries_are_404(client):
    assert_error(client.get(f"/api/dlq/{UNKNOWN}/"), 404, "not_in_dlq")
    assert_error(post(client, f"/api/dlq/{UNKNOWN}/replay/"), 404, "not_in_dlq")
    assert_error(post(client, f"/api/dlq/{UNKNOWN}/discard/"), 404, "not_in_dlq")
    task_id = submit(client)["id"]  # a live task is not in a DLQ either
    assert_error(client.get(f"/api/dlq/{task_id}/"), 404, "not_in_dlq")
    refused = AuditEntry.objects.filter(outcome="refused")
    assert sorted(r.action for r in refused) == ["discard", "replay"]


@pytest.mark.slow
def test_replay_one_onto_another_queue(api, client):  # noqa: F811
    first, second = dead_letter(api.env, client, 2)
    response = post(client, f"/api/dlq/{first}/replay/", {"reason": "fixed"})
    assert response.json() == {"task_id": first, "outcome": "replayed"}
    assert client.get(f"/api/tasks/{first}/").json()["state"] == "QUEUED"
    assert_error(post(client, f"/api/dlq/{first}/replay/"), 404, "not_in_dlq")
    moved = post(client, f"/api/dlq/{second}/replay/", {"to_queue": "rescue"}).json()
    assert moved["outcome"] == "replayed"
    assert client.get(f"/api/tasks/{second}/").json()["queue"] == "rescue"
    assert_error(post(client, f"/api/dlq/{second}/replay/", {"to_queue": "a b"}), 400)
    ok = AuditEntry.objects.filter(action="replay", outcome="ok").order_by("id")
    assert [r.task_id for r in ok] == [first, second]
    assert ok[0].reason == "fixed" and ok[0].actor == client.user


@pytest.mark.slow
def test_discard_one(api, client):  # noqa: F811
    (task_id,) = dead_letter(api.env, client, 1)
    response = post(client, f"/api/dlq/{task_id}/discard/", {"reason": "obsolete"})
    assert response.json() == {"task_id": task_id, "outcome": "discarded"}
    assert client.get("/api/dlq/").json()["total"] == 0
    assert_error(post(client, f"/api/dlq/{task_id}/discard/"), 404, "not_in_dlq")
    row = AuditEntry.objects.get(action="discard", outcome="ok")
    assert (row.task_id, row.reason, row.queue) == (task_id, "obsolete", "tests")


@pytest.mark.slow
def test_bulk_replay_by_filter_and_purge(api, client):  # noqa: F811
    ids = dead_letter(api.env, client, 3)
    assert_error(post(client, "/api/dlq/replay/", {}), 400, "invalid")  # queue is required
    none = post(client, "/api/dlq/replay/", {"queue": "tests", "task": RECORD}).json()
    assert none["done"] == 0
    some = post(client, "/api/dlq/replay/", {"queue": "tests", "limit": 1}).json()
    assert some["done"] == 1 and len(some["task_ids"]) == 1 and some["task_ids"][0] in ids
    assert_error(post(client, "/api/dlq/purge/", {"queue": "tests"}), 400, "invalid")
    dry = post(client, "/api/dlq/purge/", {"queue": "tests", "reason": "x", "dry_run": True})
    assert dry.json() == {"queue": "tests", "dry_run": True, "entries": 2, "more": False}
    purged = post(client, "/api/dlq/purge/", {"queue": "tests", "reason": "cleanup"}).json()
    assert purged == {"queue": "tests", "dry_run": False, "entries": 2, "more": False}
    assert client.get("/api/dlq/").json()["total"] == 0
    row = AuditEntry.objects.get(action="dlq_purge")
    assert (row.reason, row.affected, row.outcome) == ("cleanup", 2, "ok")
