"""Contract tests of the task endpoints: submit (every status), list, detail, cancel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dtq.engine import read_side
from tests.conftest import wait_for
from tests.test_api_support import RECORD, api, assert_error, post, submit  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "submit", "cancel")


# ----- submit ------------------------------------------------------------------------------


def test_submit_accepts_a_task_with_202_and_location(client):
    response = post(client, "/api/tasks/", {"task": RECORD, "args": [7], "kwargs": {}})
    assert response.status_code == 202
    body = response.json()
    assert body["duplicate"] is False and body["state"] == "QUEUED"
    assert body["task"] == RECORD and body["queue_name"] == "tests"
    assert response["Location"].endswith(f"/api/tasks/{body['id']}/")
    assert response["X-Request-ID"]
    record = read_side.get_task(body["id"])
    assert record["payload"] == {"args": [7], "kwargs": {}}


def test_submit_applies_options(client):
    run_after = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = submit(
        client,
        queue_name="other",
        priority=50,
        run_after=run_after,
        max_attempts=7,
        timeout=3,
        ttl=7200,
    )
    record = read_side.get_task(body["id"])
    assert (record["queue"], record["state"], record["priority"]) == ("other", "PENDING", 50)
    assert record["max_attempts"] == 7 and record["timeout"] == 3.0
    assert record["run_after"] == pytest.approx(datetime.now(UTC).timestamp() + 3600, abs=60)
    assert record["expires_at"] is not None


def test_submit_with_delay_schedules_the_task(client):
    body = submit(client, delay=30)
    assert body["state"] == "PENDING"


def test_idempotency_key_in_progress_is_409(client):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-1"}
    first = post(client, "/api/tasks/", {"task": RECORD, "args": [1]}, **headers)
    assert first.status_code == 202
    again = post(client, "/api/tasks/", {"task": RECORD, "args": [1]}, **headers)
    error = assert_error(again, 409, "idempotency_in_progress")
    assert error["details"]["task_id"] == first.json()["id"]


def test_idempotency_key_with_another_body_is_422(client):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-2"}
    assert post(client, "/api/tasks/", {"task": RECORD, "args": [1]}, **headers).status_code == 202
    other = post(client, "/api/tasks/", {"task": RECORD, "args": [2]}, **headers)
    assert_error(other, 422, "idempotency_conflict")


@pytest.mark.slow
def test_idempotency_key_of_a_finished_task_replays_with_200(api, client):  # noqa: F811
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-3"}
    first = post(client, "/api/tasks/", {"task": RECORD, "args": [3]}, **headers).json()
    api.env.worker("--burst")
    wait_for(lambda: client.get(f"/api/tasks/{first['id']}/").json()["state"] == "SUCCEEDED")
    replay = post(client, "/api/tasks/", {"task": RECORD, "args": [3]}, **headers)
    assert replay.status_code == 200
    body = replay.json()
    assert body["duplicate"] is True and body["id"] == first["id"]
    assert body["state"] == "SUCCEEDED"


def test_idempotency_keys_belong_to_the_user_who_sent_them(api, client):  # noqa: F811
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-4"}
    mine = post(client, "/api/tasks/", {"task": RECORD, "args": [4]}, **headers)
    assert mine.status_code == 202
    for args in ([4], [5]):  # same body (old: 200 with my id), other body (old: 422, my id)
        squatter = api.client("submit")
        theirs = post(squatter, "/api/tasks/", {"task": RECORD, "args": args}, **headers)
        assert theirs.status_code == 202 and theirs.json()["id"] != mine.json()["id"]
    again = post(
        client, "/api/tasks/", {"task": RECORD, "args": [4]}, HTTP_IDEMPOTENCY_KEY="order-4"
    )
    error = assert_error(again, 409, "idempotency_in_progress")
    assert error["details"]["task_id"] == mine.json()["id"]  # my own task: I may see its id
    assert "'order-4'" in error["message"] and "user:" not in error["message"]


def test_a_key_of_the_longest_length_is_scoped_too(client):
    headers = {"HTTP_IDEMPOTENCY_KEY": "k" * 200}
    first = post(client, "/api/tasks/", {"task": RECORD}, **headers)
    assert first.status_code == 202
    again = post(client, "/api/tasks/", {"task": RECORD}, **headers)
    assert assert_error(again, 409)["details"]["task_id"] == first.json()["id"]


@pytest.mark.parametrize("can_view", [False, True], ids=["submit-only", "viewer"])
def test_shared_keys_show_a_task_id_only_to_viewers(api, dtq_env, can_view):  # noqa: F811
    dtq_env.configure(API_IDEMPOTENCY_SCOPE="queue")
    owner = api.client("submit")
    headers = {"HTTP_IDEMPOTENCY_KEY": "shared-1"}
    first = post(owner, "/api/tasks/", {"task": RECORD, "args": [1]}, **headers).json()
    other = api.client("submit", "view") if can_view else api.client("submit")
    for args, status in (([2], 422), ([1], 409)):
        error = assert_error(
            post(other, "/api/tasks/", {"task": RECORD, "args": args}, **headers), status
        )
        assert (first["id"] in error["message"]) is can_view
        assert (error["details"].get("task_id") == first["id"]) is can_view


def test_invalid_idempotency_key_is_400(client):
    response = post(client, "/api/tasks/", {"task": RECORD}, HTTP_IDEMPOTENCY_KEY="no spaces")
    error = assert_error(response, 400, "invalid")
    assert "Idempotency-Key" in error["details"]["fields"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "task"),
        ({"task": RECORD, "args": "x"}, "args"),
        ({"task": RECORD, "kwargs": []}, "kwargs"),
        ({"task": RECORD, "priority": 101}, "priority"),
        ({"task": RECORD, "queue_name": "bad name"}, "queue_name"),
        ({"task": RECORD, "max_attempts": 0}, "max_attempts"),
        ({"task": RECORD, "timeout": -1}, "timeout"),
        ({"task": RECORD, "ttl": 0}, "ttl"),
        ({"task": RECORD, "delay": -5}, "delay"),
        ({"task": RECORD, "delay": 1, "run_after": "2030-01-01T00:00:00Z"}, "delay"),
        ({"task": RECORD, "run_after": "2999-01-01T00:00:00Z"}, "run_after"),
        ({"task": RECORD, "run_after": "tomorrow"}, "run_after"),
        ({"task": RECORD, "args": [10**30]}, "args"),
        ({"task": "os.system"}, "task"),
    ],
)
def test_invalid_fields_are_400_with_per_field_messages(client, body, field):
    error = assert_error(post(client, "/api/tasks/", body), 400, "invalid")
    assert field in error["details"]["fields"], error
    assert all(isinstance(m, str) for m in error["details"]["fields"][field])


def test_unknown_task_is_400_and_nothing_is_imported(client):
    error = assert_error(post(client, "/api/tasks/", {"task": "tests.testapp.nope"}), 400)
    assert "no task named" in error["details"]["fields"]["task"][0]


def test_a_body_that_is_not_an_object_is_400(client):
    assert_error(post(client, "/api/tasks/", [1, 2]), 400, "invalid")


def test_malformed_json_is_400(client):
    response = client.post("/api/tasks/", b"{nope", content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_non_json_media_type_is_415(client):
    response = client.post("/api/tasks/", b"task=x", content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type")


def test_non_utf8_body_is_415(client):
    body = '{"task": "caf\u00e9"}'.encode("latin-1")
    assert_error(client.post("/api/tasks/", body, content_type="application/json"), 415)
    response = client.post("/api/tasks/", b"{}", content_type="application/json; charset=latin-1")
    assert_error(response, 415, "not_utf8")


def test_body_over_the_limit_is_413_before_parsing(client, settings):
    settings.DTQ = {**settings.DTQ, "API_MAX_BODY_BYTES": 1000}
    # Not even valid JSON: the length alone decides, before the parser runs.
    response = client.post("/api/tasks/", b"x" * 1001, content_type="application/json")
    assert_error(response, 413, "payload_too_large")


def test_payload_over_the_engine_limit_is_413(client, settings):
    settings.DTQ = {**settings.DTQ, "MAX_PAYLOAD_BYTES": 100}
    response = post(client, "/api/tasks/", {"task": RECORD, "args": ["x" * 200]})
    assert_error(response, 413, "payload_too_large")


def test_full_queue_is_429_with_retry_after(client, settings):
    settings.DTQ = {**settings.DTQ, "QUEUE_MAX_DEPTH": {"tests": 1}}
    submit(client)
    response = post(client, "/api/tasks/", {"task": RECORD})
    error = assert_error(response, 429, "queue_full")
    assert int(response["Retry-After"]) >= 1
    assert error["details"]["queue"] == "tests"


def test_submissions_are_throttled_when_configured(client, settings):
    from django.core.cache import cache

    cache.clear()
    settings.DTQ = {**settings.DTQ, "API_SUBMIT_THROTTLE": "2/minute"}
    submit(client)
    submit(client)
    response = post(client, "/api/tasks/", {"task": RECORD})
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0
    assert client.get("/api/tasks/").status_code == 200  # reads are never throttled
    cache.clear()


# ----- list and detail ---------------------------------------------------------------------


def newest_first(tasks):
    """Return the ids in the promised order: by the time they entered their state, then id."""
    ordered = sorted(tasks, key=lambda t: (t["updated_at"], t["id"]), reverse=True)
    return [t["id"] for t in ordered]


def test_list_is_newest_first_with_cursor_pages(client):
    ids = [submit(client, args=[i])["id"] for i in range(5)]
    first = client.get("/api/tasks/", {"limit": 2}).json()
    second = client.get("/api/tasks/", {"limit": 2, "cursor": first["next_cursor"]}).json()
    third = client.get("/api/tasks/", {"limit": 2, "cursor": second["next_cursor"]}).json()
    listed = [t for page in (first, second, third) for t in page["results"]]
    assert [t["id"] for t in listed] == newest_first(listed)
    assert sorted(t["id"] for t in listed) == sorted(ids)
    assert third["next_cursor"] is None


def test_list_merges_queues_and_filters(client):
    a = submit(client, queue_name="qa")["id"]
    b = submit(client, queue_name="qb", delay=60)["id"]
    c = submit(client, queue_name="qa")["id"]
    everything = client.get("/api/tasks/").json()["results"]
    assert [t["id"] for t in everything] == newest_first(everything)
    assert {t["id"] for t in everything} == {a, b, c}
    by_queue = client.get("/api/tasks/", {"queue": "qa"}).json()["results"]
    assert {t["id"] for t in by_queue} == {a, c}
    by_state = client.get("/api/tasks/", {"state": "PENDING"}).json()["results"]
    assert [t["id"] for t in by_state] == [b]
    assert client.get("/api/tasks/", {"task": "other.name"}).json()["results"] == []
    assert len(client.get("/api/tasks/", {"task": RECORD}).json()["results"]) == 3
    future = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    assert client.get("/api/tasks/", {"created_after": future}).json()["results"] == []
    assert len(client.get("/api/tasks/", {"created_before": future}).json()["results"]) == 3


def test_list_across_queues_pages_without_gaps(client):
    ids = [submit(client, queue_name=f"q{i % 3}")["id"] for i in range(7)]
    seen, cursor = [], None
    while True:
        page = client.get("/api/tasks/", {"limit": 3, **({"cursor": cursor} if cursor else {})})
        seen += [t["id"] for t in page.json()["results"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)  # every task once, none twice
    assert seen == newest_first(client.get("/api/tasks/", {"limit": 10}).json()["results"])


def test_filtered_list_pages(client):
    for i in range(6):
        submit(client, args=[i], priority=i)
    page = client.get("/api/tasks/", {"task": RECORD, "limit": 4}).json()
    assert len(page["results"]) == 4 and page["next_cursor"]
    rest = client.get("/api/tasks/", {"task": RECORD, "cursor": page["next_cursor"]}).json()
    assert len(rest["results"]) == 2


@pytest.mark.parametrize(
    "params",
    [{"state": "NOPE"}, {"limit": 0}, {"limit": 5000}, {"queue": "a b"}, {"cursor": "zzz"}],
)
def test_list_rejects_bad_filters_with_400(client, params):
    submit(client)
    assert_error(client.get("/api/tasks/", params), 400)


def test_detail_shows_arguments_state_and_timestamps(client):
    body = submit(client, args=[1, "two"], kwargs={"value": 3})
    detail = client.get(f"/api/tasks/{body['id']}/").json()
    assert detail["args"] == [1, "two"] and detail["kwargs"] == {"value": 3}
    assert detail["state"] == "QUEUED" and detail["attempt"] == 0
    assert detail["result"] is None and detail["errors"] == [] and detail["history"] == []
    assert detail["created_at"].endswith("Z")


@pytest.mark.slow
def test_detail_of_a_finished_task_has_result_and_history(api, client):  # noqa: F811
    task_id = submit(client, args=["done"])["id"]
    api.env.worker("--burst")
    wait_for(lambda: client.get(f"/api/tasks/{task_id}/").json()["state"] == "SUCCEEDED")
    detail = client.get(f"/api/tasks/{task_id}/").json()
    assert detail["result"] == "done" and detail["has_result"] is True
    assert detail["attempt"] == 1 and detail["history"][0]["outcome"] == "succeeded"
    assert detail["finished_at"] is not None


def test_unknown_task_is_404(client):
    assert_error(client.get("/api/tasks/0000000000000000000000/"), 404, "not_found")
    assert_error(client.get("/api/tasks/not-an-id/"), 404, "not_found")


# ----- cancel ------------------------------------------------------------------------------


def test_cancel_a_waiting_task(client):
    task_id = submit(client)["id"]
    response = post(client, f"/api/tasks/{task_id}/cancel/", {"reason": "not needed"})
    assert response.status_code == 200
    assert response.json() == {"task_id": task_id, "outcome": "cancelled"}
    assert client.get(f"/api/tasks/{task_id}/").json()["state"] == "CANCELLED"


def test_cancel_without_a_body(client):
    task_id = submit(client)["id"]
    assert post(client, f"/api/tasks/{task_id}/cancel/").json()["outcome"] == "cancelled"


def test_cancel_a_finished_task_is_409(client):
    task_id = submit(client)["id"]
    post(client, f"/api/tasks/{task_id}/cancel/")
    error = assert_error(post(client, f"/api/tasks/{task_id}/cancel/"), 409, "task_finished")
    assert error["details"]["state"] == "CANCELLED"


def test_cancel_an_unknown_task_is_404(client):
    response = post(client, "/api/tasks/0000000000000000000000/cancel/")
    assert_error(response, 404, "task_not_found")


# ----- search ------------------------------------------------------------------------------


def test_list_searches_by_argument_value_and_error(client, dtq_env):
    from tests.ops_support import claim_by_hand, finalize_by_hand

    submit(client, args=[41])
    wanted = submit(client, args=[42], queue_name="other")["id"]
    response = client.get("/api/tasks/", {"q": "args.0=42"})
    assert response.status_code == 200
    body = response.json()
    assert [t["id"] for t in body["results"]] == [wanted]
    assert body["scanned"] == 2 and body["partial"] is False
    assert client.get("/api/tasks/", {"q": "args.0=42", "queue": "tests"}).json()["results"] == []
    [claimed] = claim_by_hand("tests", 1)
    finalize_by_hand(claimed, "fail", {"class": "builtins.OSError", "message": "disk full"})
    found = client.get("/api/tasks/", {"q": "error:disk", "state": "DEAD_LETTERED"}).json()
    assert [t["id"] for t in found["results"]] == [claimed["id"]]


def test_a_search_that_does_not_parse_is_400_invalid_query(client):
    error = assert_error(client.get("/api/tasks/", {"q": "attempt>many"}), 400, "invalid_query")
    assert "not a whole number" in error["message"]
    assert error["details"]["fields"]["q"]
