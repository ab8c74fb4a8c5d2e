"""The permission matrix: every endpoint x (its permission / every other one / anonymous)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from dtq.models import AuditEntry
from tests.test_api_support import PERMISSIONS, RECORD, api, assert_error, post  # noqa: F401

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)
TASK = "0000000000000000000000"
ENDPOINTS = [
    ("view", "GET", "/api/tasks/", None),
    ("view", "GET", f"/api/tasks/{TASK}/", None),
    ("view", "GET", "/api/queues/", None),
    ("view", "GET", "/api/queues/tests/", None),
    ("view", "GET", "/api/dlq/", None),
    ("view", "GET", f"/api/dlq/{TASK}/", None),
    ("view", "GET", f"/api/workflows/{TASK}/", None),
    ("cancel", "POST", f"/api/workflows/{TASK}/cancel/", {}),
    ("view", "GET", "/api/workers/", None),
    ("view", "GET", "/api/workers/nobody/", None),
    ("view", "GET", "/api/ready/", None),
    ("view", "GET", "/api/schema/", None),
    ("view", "GET", "/api/docs/", None),
    ("view", "GET", "/metrics", None),
    ("audit", "GET", "/api/audit/", None),
    ("submit", "POST", "/api/tasks/", {"task": RECORD}),
    ("submit", "POST", "/api/tasks/bulk/", {"tasks": [{"task": RECORD}]}),
    ("submit", "GET", "/api/tasks/catalogue/", None),
    ("submit", "POST", "/api/tasks/run/", {"task": RECORD}),
    ("replay", "POST", f"/api/dlq/{TASK}/edit/", {"args": [1]}),
    ("replay", "POST", f"/api/tasks/{TASK}/retry/", {"args": [1]}),
    ("cancel", "POST", f"/api/tasks/{TASK}/cancel/", {}),
    ("replay", "POST", f"/api/dlq/{TASK}/replay/", {}),
    ("replay", "POST", "/api/dlq/replay/", {"queue": "tests"}),
    ("discard", "POST", f"/api/dlq/{TASK}/discard/", {}),
    ("purge", "POST", "/api/queues/tests/purge/", {"reason": "r"}),
    ("purge", "POST", "/api/dlq/purge/", {"queue": "tests", "reason": "r"}),
    ("pause", "POST", "/api/queues/tests/pause/", {}),
    ("pause", "POST", "/api/queues/tests/resume/", {}),
    ("view", "GET", "/api/queues/tests/limits/", None),
    ("pause", "PUT", "/api/queues/tests/limits/", {"max_concurrency": 3}),
    ("replay", "POST", "/api/bulk/retry/", {"q": ""}),
    ("replay", "POST", "/api/bulk/retry/start/", {"job": "0" * 32}),
    ("cancel", "POST", "/api/bulk/cancel/", {"q": ""}),
    ("cancel", "POST", "/api/bulk/cancel/start/", {"job": "0" * 32}),
    ("replay", "POST", "/api/bulk/replay/", {"q": ""}),
    ("replay", "POST", "/api/bulk/replay/start/", {"job": "0" * 32}),
    ("discard", "POST", "/api/bulk/discard/", {"q": ""}),
    ("discard", "POST", "/api/bulk/discard/start/", {"job": "0" * 32}),
    ("view", "GET", "/api/bulk/jobs/nojob/", None),
    ("view", "GET", "/api/schedules/", None),
    ("view", "GET", "/api/schedules/tests/", None),
    ("schedules", "POST", "/api/schedules/", {"name": "n", "task": RECORD, "every_seconds": 60}),
    ("schedules", "PATCH", "/api/schedules/tests/", {}),
    ("schedules", "DELETE", "/api/schedules/tests/", None),
    ("schedules", "POST", "/api/schedules/tests/pause/", {}),
    ("schedules", "POST", "/api/schedules/tests/resume/", {}),
    ("schedules", "POST", "/api/schedules/tests/run/", {}),
]
IDS = [f"{method} {url} needs {action}" for action, method, url, _ in ENDPOINTS]


def call(client: APIClient, method: str, url: str, data: object) -> object:
    if method == "PUT":
        return client.generic(method, url, json.dumps(data), content_type="application/json")
    if method in ("PATCH", "DELETE"):
        return client.generic(method, url, "{}", content_type="application/json")
    return client.get(url) if method == "GET" else post(client, url, data)


@pytest.mark.parametrize(("action", "method", "url", "data"), ENDPOINTS, ids=IDS)
def test_permission_matrix(api, action, method, url, data):  # noqa: F811
    others = [a for a in PERMISSIONS if a != action]
    assert_error(call(APIClient(), method, url, data), 401, "not_authenticated")
    denied = call(api.client(*others), method, url, data)
    assert_error(denied, 403, "permission_denied")
    assert not AuditEntry.objects.exists()  # refused before anything was attempted
    allowed = call(api.client(action), method, url, data)
    assert allowed.status_code not in (401, 403), allowed.content[:300]
    # ready/ is 503 here: no scheduler or reaper runs in this test.
    assert allowed.status_code < 500 or url == "/api/ready/", allowed.content[:300]


def test_every_routed_endpoint_is_in_the_matrix(api):  # noqa: F811
    schema = api.client("view").get("/api/schema/").json()
    routed = {
        (method.upper(), "/api" + path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    covered = {
        (
            m,
            u.replace(TASK, "{task_id}")
            .replace("workflows/{task_id}", "workflows/{workflow_id}")
            .replace("/tests/", "/{name}/")
            .replace("/nobody/", "/{worker_id}/")
            .replace("/nojob/", "/{job_id}/"),
        )
        for _, m, u, _ in ENDPOINTS
    }
    assert routed - {("GET", "/api/health/")} <= covered
