"""Bulk work over HTTP is bounded per request (BULK_REQUEST_LIMIT) and continues in later ones."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from dtq.engine import read_side
from dtq.models import AuditEntry
from tests.ops_support import dead_letter_by_hand
from tests.test_api_support import api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 100


@pytest.fixture
def bounded(dtq_env):
    dtq_env.configure(BULK_REQUEST_LIMIT=LIMIT)
    return dtq_env


def dead(n: int) -> list[str]:
    for i in range(n):
        tasks.record.enqueue(i)
    return dead_letter_by_hand(n)


def test_bulk_replay_goes_one_bounded_part_per_request(bounded, api):  # noqa: F811
    ids = dead(250)
    client = api.client("replay")
    body, seen, parts = {"queue": "tests", "reason": "fixed"}, [], []
    while True:
        part = post(client, "/api/dlq/replay/", body).json()
        parts.append(part["done"])
        seen += part["task_ids"]
        assert len(part["task_ids"]) <= LIMIT
        if not part["more"]:
            assert part["next_cursor"] is None
            break
        body = {**body, "cursor": part["next_cursor"]}
    assert parts == [100, 100, 50] and sorted(seen) == sorted(ids)
    rows = AuditEntry.objects.filter(action="replay").order_by("id")
    assert [r.affected for r in rows] == [100, 100, 50]
    assert [r.parameters["more"] for r in rows] == [True, True, False]
    error = assert_error(post(client, "/api/dlq/replay/", {"queue": "tests", "limit": 101}), 400)
    assert "BULK_REQUEST_LIMIT" in str(error["details"])
    bad = post(client, "/api/dlq/replay/", {"queue": "tests", "cursor": "\u00b2-0"})
    assert_error(bad, 400, "invalid")


def test_dlq_purge_goes_one_bounded_part_per_request(bounded, api):  # noqa: F811
    dead(250)
    client = api.client("purge")
    parts = []
    while not parts or parts[-1]["more"]:
        parts.append(post(client, "/api/dlq/purge/", {"queue": "tests", "reason": "old"}).json())
    assert [p["entries"] for p in parts] == [100, 100, 50]
    assert read_side.dlq_entries("tests", 1)["total"] == 0


def test_queue_purge_continues_with_the_tasks_of_its_first_part(bounded, api):  # noqa: F811
    for i in range(250):
        tasks.record.enqueue(i)
    client = api.client("purge")
    first = post(client, "/api/queues/tests/purge/", {"reason": "bad deploy"}).json()
    assert (first["purged"], first["more"]) == (100, True)
    later = tasks.record.enqueue("submitted after the purge started").id
    body = {"reason": "bad deploy", "cursor": first["next_cursor"]}
    rest = []
    while not rest or rest[-1]["more"]:
        rest.append(post(client, "/api/queues/tests/purge/", body).json())
    assert sum(p["purged"] for p in rest) == 150
    assert read_side.get_task(later)["state"] == "QUEUED"
    future = str(int(time.time() * 1000) + 60_000)
    for cursor in (future, "\u0661\u0662", "x"):
        body = {"reason": "x", "cursor": cursor}
        assert_error(post(client, "/api/queues/tests/purge/", body), 400, "invalid")


def test_the_admin_does_one_bounded_part_per_request(bounded, admin_client):
    dead(150)
    for i in range(150):
        tasks.record.enqueue(i)
    action = {"action": "discard", "queue": "tests", "scope": "matching", "confirm": "yes"}
    response = admin_client.post(reverse("admin:dtq_taskqueue_dlq_action"), action, follow=True)
    assert "more may remain" in response.content.decode()
    assert read_side.dlq_entries("tests", 1)["total"] == 50
    purge = reverse("admin:dtq_taskqueue_queue_purge", args=["tests"])
    response = admin_client.post(purge, {"reason": "bad deploy"})
    assert response.status_code == 302 and response["Location"] == purge  # offers the rest
    assert read_side.queue_overview("tests")["queued"] == 50
