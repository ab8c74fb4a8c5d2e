"""Contract tests of workers, audit, health, ready, /metrics, the schema and docs, and the
API-wide rules: error shape on unknown paths and methods, session auth with CSRF, 401/403."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.conftest import wait_for
from tests.test_api_support import RECORD, api, assert_error, post, submit  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "a-metrics-token-of-32-characters"


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "submit", "cancel", "pause", "audit")


# ----- workers -------------------------------------------------------------------------------


@pytest.mark.slow
def test_workers_list_live_workers(api, client):  # noqa: F811
    assert client.get("/api/workers/").json() == {"results": []}
    api.env.worker("--concurrency", "3", "--worker-id", "w-api")
    workers = wait_for(lambda: client.get("/api/workers/").json()["results"])
    (worker,) = workers
    assert worker["id"] == "w-api" and worker["queues"] == ["tests"]
    assert worker["concurrency"] == 3 and worker["alive"] is True
    assert worker["pid"] > 0 and worker["host"] and worker["heartbeat_age"] >= 0
    assert {"in_flight", "processed", "heartbeat", "state"} <= set(worker)


# ----- audit ---------------------------------------------------------------------------------


def test_audit_lists_rows_newest_first_with_filters_and_pages(client):
    ids = [submit(client)["id"] for _ in range(3)]
    for task_id in ids:
        post(client, f"/api/tasks/{task_id}/cancel/", {"reason": "r"})
    post(client, "/api/queues/tests/pause/")
    page = client.get("/api/audit/", {"limit": 3}).json()
    assert [r["action"] for r in page["results"]] == ["pause", "cancel", "cancel"]
    rest = client.get("/api/audit/", {"limit": 3, "cursor": page["next_cursor"]}).json()
    assert [r["task_id"] for r in rest["results"]] == [ids[0]] and rest["next_cursor"] is None
    cancels = client.get("/api/audit/", {"action": "cancel"}).json()["results"]
    assert len(cancels) == 3
    row = cancels[0]
    assert row["actor"] == client.user.username and row["source"] == "api"
    assert row["outcome"] == "ok" and row["client_address"] == "203.0.113.7"
    by_task = client.get("/api/audit/", {"task_id": ids[1]}).json()["results"]
    assert [r["task_id"] for r in by_task] == [ids[1]]
    assert client.get("/api/audit/", {"actor": "nobody"}).json()["results"] == []
    assert_error(client.get("/api/audit/", {"action": "explode"}), 400, "invalid")
    assert_error(client.get("/api/audit/", {"cursor": "x"}), 400, "invalid_cursor")


def test_audit_filters_by_every_recorded_action(client):
    # The filter once listed seven of the twelve actions: submit and periodic_* were refused.
    from dtq.engine.actions import AuditAction

    for action in AuditAction:
        reply = client.get("/api/audit/", {"action": action.value})
        assert reply.status_code == 200, action


# ----- health and readiness ------------------------------------------------------------------


def test_health_needs_no_credentials():
    response = APIClient().get("/api/health/")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_ready_is_503_naming_each_missing_part(client):
    error = assert_error(client.get("/api/ready/"), 503, "not_ready")
    checks = error["details"]["checks"]
    assert checks["redis"]["ok"] is True
    assert checks["scheduler"]["ok"] is False and checks["reaper"]["ok"] is False
    assert "scheduler" in error["message"] and "reaper" in error["message"]


@pytest.mark.slow
def test_ready_with_scheduler_and_reaper(api, client):  # noqa: F811
    api.env.spawn("dtq_scheduler")
    wait_for(lambda: "scheduler" not in client.get("/api/ready/").json()["error"]["message"])
    api.env.spawn("dtq_reaper")
    response = wait_for(lambda: (r := client.get("/api/ready/")).status_code == 200 and r)
    body = response.json()
    assert body["ready"] is True
    assert all(check["ok"] for check in body["checks"].values())


@pytest.mark.slow
def test_ready_when_redis_is_unreachable(client, settings):
    settings.DTQ = {**settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}  # refused (retried)
    error = assert_error(client.get("/api/ready/"), 503, "not_ready")
    assert error["details"]["checks"]["redis"]["ok"] is False


def test_refused_redis_commands_are_400_in_the_error_shape(api, client, settings):  # noqa: F811
    # A database index the server does not have: Redis is up but refuses every command, which
    # is no outage (tests/test_redis_errors.py has the 503 for an unreachable Redis).
    settings.DTQ = {**settings.DTQ, "REDIS_URL": api.env.url.rsplit("/", 1)[0] + "/999"}
    error = assert_error(client.get("/api/queues/"), 400, "redis_refused")
    assert "DB index is out of range" in error["message"]
    assert_error(client.get("/api/ready/"), 503, "not_ready")


# ----- metrics -------------------------------------------------------------------------------


def test_metrics_export_counters_and_gauges(client):
    submit(client)
    submit(client, delay=60)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert 'dtq_tasks_submitted_total{queue="tests"} 2' in text
    for counter in ("succeeded", "failed", "dead_lettered", "absorbed", "reclaimed", "stale"):
        assert f'dtq_tasks_{counter}_total{{queue="tests"}} 0' in text
    assert "# TYPE dtq_tasks_submitted_total counter" in text
    assert 'dtq_queue_queued{queue="tests"} 1' in text
    assert 'dtq_queue_scheduled{queue="tests"} 1' in text
    assert 'dtq_queue_depth{queue="tests",band="1"} 1' in text
    assert 'dtq_queue_dlq{queue="tests"} 0' in text
    assert "dtq_workers_live 0" in text
    assert 'dtq_processes_live{role="scheduler"} 0' in text


def test_metrics_need_permission_or_the_token(api, settings):  # noqa: F811
    assert_error(APIClient().get("/metrics"), 401)
    assert_error(api.client("submit").get("/metrics"), 403)
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert_error(bearer.get("/metrics"), 401)  # no token configured: bearer means nothing
    settings.DTQ = {**settings.DTQ, "METRICS_TOKEN": TOKEN}
    assert bearer.get("/metrics").status_code == 200
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer wrong-token-wrong-token-wrong")
    assert_error(wrong.get("/metrics"), 401)
    assert bearer.get("/api/ready/").status_code == 503  # the token may probe readiness too
    assert_error(bearer.get("/api/queues/"), 401)  # but nothing else


def test_metrics_ignore_the_accept_header(client):
    response = client.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4")
    assert response.status_code == 200


# ----- schema and docs -----------------------------------------------------------------------


def test_schema_is_openapi_3_of_the_api_only(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert schema["servers"] == [{"url": "/api"}]
    assert "/tasks/" in schema["paths"] and "/dlq/replay/" in schema["paths"]
    assert not any(p.startswith("/admin") for p in schema["paths"])
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])


def test_docs_page_is_served_without_a_cdn(api):  # noqa: F811
    browser = APIClient()
    browser.force_login(api.user("view"))
    response = browser.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn" not in page.lower()
    assert "/api/schema/" in page


def test_schema_and_docs_need_the_view_permission(api):  # noqa: F811
    assert_error(APIClient().get("/api/schema/"), 401)
    assert_error(APIClient().get("/api/docs/"), 401)
    assert_error(api.client("submit").get("/api/schema/"), 403)


# ----- API-wide rules ------------------------------------------------------------------------


def test_unknown_paths_and_methods_keep_the_error_shape(client):
    assert_error(client.get("/api/nothing/here/"), 404, "not_found")
    assert_error(client.delete("/api/tasks/"), 405, "method_not_allowed")
    assert_error(client.options("/api/tasks/"), 405, "method_not_allowed")
    assert_error(client.get("/api/tasks/", HTTP_ACCEPT="text/html"), 406, "not_acceptable")


def test_session_authentication_with_csrf(api):  # noqa: F811
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(api.user("view", "submit"))
    assert browser.get("/api/tasks/").status_code == 200
    refused = browser.post("/api/tasks/", {"task": RECORD}, format="json")
    assert_error(refused, 403, "permission_denied")  # no CSRF token: a forged request
    assert "CSRF" in refused.json()["error"]["message"]


def test_anonymous_is_401_with_www_authenticate():
    response = APIClient().get("/api/tasks/")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


def test_bad_token_is_401():
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef")
    assert_error(bad.get("/api/tasks/"), 401, "authentication_failed")


def test_staff_without_permissions_is_403(api):  # noqa: F811
    staff = api.client(is_staff=True)
    assert_error(staff.get("/api/queues/"), 403, "permission_denied")


def test_superuser_may_do_everything(api):  # noqa: F811
    root = api.client(is_superuser=True)
    assert root.get("/api/queues/").status_code == 200
    assert post(root, "/api/tasks/", {"task": RECORD}).status_code == 202


def test_unexpected_errors_are_500_without_traceback(api, client):  # noqa: F811
    # A damaged worker record (pid not a number) makes the read side raise ValueError.
    keys = api.env.keys
    api.env.client.zadd(keys.workers, {"broken": 1})
    api.env.client.hset(keys.worker("broken"), mapping={"pid": "secret-internals"})
    error = assert_error(client.get("/api/workers/"), 500, "internal_error")
    assert "secret" not in error["message"] and "Traceback" not in error["message"]


# ----- settings checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "error_id"),
    [
        ({"METRICS_TOKEN": "short"}, "dtq.E020"),
        ({"METRICS_TOKEN": 12345678901234567890}, "dtq.E020"),
        ({"API_SUBMIT_THROTTLE": "often"}, "dtq.E021"),
        ({"API_SUBMIT_THROTTLE": "0/minute"}, "dtq.E021"),
        ({"API_MAX_BODY_BYTES": 0}, "dtq.E002"),
        ({"API_PAGE_SIZE": -1}, "dtq.E002"),
    ],
)
def test_api_settings_are_checked(settings, values, error_id):
    from dtq.checks import check_settings

    settings.DTQ = {**settings.DTQ, **values}
    assert error_id in {e.id for e in check_settings()}


def test_valid_api_settings_pass_the_checks(settings):
    from dtq.checks import check_settings

    settings.DTQ = {**settings.DTQ, "METRICS_TOKEN": TOKEN, "API_SUBMIT_THROTTLE": "10/s"}
    assert check_settings() == []
