"""Contract tests of POST /api/tasks/bulk/: accepted, invalid, full queue, limits, throttle."""

from __future__ import annotations

import pytest

from dtq.api.inputs import MAX_BULK_TASKS
from dtq.engine import read_side
from tests.test_api_support import RECORD, api, assert_error, post  # noqa: F401

pytestmark = pytest.mark.django_db
URL = "/api/tasks/bulk/"


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "submit")


def items(n: int, **fields) -> list[dict]:
    return [{"task": RECORD, "args": [i], **fields} for i in range(n)]


def test_bulk_accepts_every_task_in_order_with_202(client):
    response = post(client, URL, {"tasks": [*items(3), {"task": RECORD, "priority": 50}]})
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["state"] for r in results] == ["QUEUED"] * 4
    assert all(r["url"].endswith(f"/api/tasks/{r['id']}/") for r in results)
    payloads = [read_side.get_task(r["id"])["payload"] for r in results[:3]]
    assert payloads == [{"args": [i], "kwargs": {}} for i in range(3)]
    assert read_side.get_task(results[3]["id"])["priority"] == 50


def test_invalid_items_are_400_naming_each_and_nothing_is_written(client, dtq_env):
    body = {"tasks": [*items(2), {"task": RECORD, "priority": 101}, {"task": "os.system"}]}
    error = assert_error(post(client, URL, body), 400, "invalid")
    fields = error["details"]["fields"]["tasks"]
    assert set(fields) == {"2", "3"}  # keyed by item index, only the invalid ones
    assert "priority" in fields["2"] and "task" in fields["3"]
    assert dtq_env.stats().get("active", 0) == 0


@pytest.mark.parametrize(
    "body", [{}, {"tasks": []}, {"tasks": "x"}, {"tasks": items(MAX_BULK_TASKS + 1)}, [1]]
)
def test_a_missing_empty_or_oversized_list_is_400(client, body):
    assert_error(post(client, URL, body), 400, "invalid")


def test_an_oversized_payload_is_413_naming_the_item(client, settings, dtq_env):
    settings.DTQ = {**settings.DTQ, "MAX_PAYLOAD_BYTES": 100}
    body = {"tasks": [*items(1), {"task": RECORD, "args": ["x" * 200]}]}
    error = assert_error(post(client, URL, body), 413, "payload_too_large")
    assert [item["index"] for item in error["details"]["items"]] == [1]
    assert error["details"]["accepted"] == []
    assert dtq_env.stats().get("active", 0) == 0


def test_a_full_queue_is_429_listing_the_accepted_and_the_refused(client, settings):
    settings.DTQ = {**settings.DTQ, "QUEUE_MAX_DEPTH": {"tests": 2}}
    response = post(client, URL, {"tasks": items(4)})
    error = assert_error(response, 429, "queue_full")
    assert int(response["Retry-After"]) >= 1
    assert [item["index"] for item in error["details"]["items"]] == [2, 3]
    accepted = error["details"]["accepted"]
    assert len(accepted) == 2
    assert all(read_side.get_task(a["id"])["state"] == "QUEUED" for a in accepted)


def test_an_idempotency_key_is_refused(client):
    response = post(client, URL, {"tasks": items(1)}, HTTP_IDEMPOTENCY_KEY="k1")
    error = assert_error(response, 400, "invalid")
    assert "Idempotency-Key" in error["details"]["fields"]


def test_each_item_counts_against_the_submit_throttle(client, settings, dtq_env):
    from django.core.cache import cache

    cache.clear()
    settings.DTQ = {**settings.DTQ, "API_SUBMIT_THROTTLE": "3/minute"}
    assert post(client, URL, {"tasks": items(2)}).status_code == 202
    response = post(client, URL, {"tasks": items(2)})
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0
    assert dtq_env.stats()["active"] == 2
    assert post(client, "/api/tasks/", {"task": RECORD}).status_code == 202  # the third
    cache.clear()
