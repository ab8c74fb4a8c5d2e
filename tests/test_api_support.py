"""Fixtures and helpers for the REST API tests (tests/test_api_*.py import them from here)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import Env, wait_for

PERMISSIONS = {
    "view": "view_queues",
    "submit": "submit_task",
    "cancel": "cancel_task",
    "replay": "replay_task",
    "discard": "discard_task",
    "purge": "purge_queue",
    "pause": "pause_queue",
    "audit": "view_auditentry",
    "schedules": "change_periodicschedule",
}
RECORD = "tests.testapp.tasks.record"
PERMANENT = "tests.testapp.tasks.permanent"
_names = itertools.count()


class Api:
    """Makes API clients for users holding chosen dtq permissions."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def user(self, *actions: str, **fields: Any) -> User:
        """Create a user holding the permissions of the given actions (see PERMISSIONS)."""
        user = User.objects.create_user(
            f"user{next(_names)}", **fields
        )  # no password: no slow hashing
        codenames = [PERMISSIONS[a] for a in actions]
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="dtq", codename__in=codenames)
        )
        assert user.user_permissions.count() == len(codenames), "a dtq permission is missing"
        return user

    def client(self, *actions: str, **fields: Any) -> APIClient:
        """Return a client authenticated by a DRF token as a user with these permissions."""
        user = self.user(*actions, **fields)
        client = APIClient(REMOTE_ADDR="203.0.113.7")
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        client.user = user  # type: ignore[attr-defined]
        return client

    def anonymous(self) -> APIClient:
        """Return a client without credentials."""
        return APIClient()


@pytest.fixture
def api(dtq_env: Env, db: Any) -> Iterator[Api]:
    """An Api factory on this test's private Redis prefix and database."""
    yield Api(dtq_env)


def post(client: APIClient, url: str, data: Any = None, **extra: Any) -> Any:
    """POST data as JSON (no body when data is None)."""
    if data is None:
        return client.post(url, **extra)
    return client.post(url, data, format="json", **extra)


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """Check a response is an error in the API's one shape; return its 'error' member."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], dict)
    if code is not None:
        assert error["code"] == code, error
    return error


def submit(client: APIClient, task: str = RECORD, **fields: Any) -> dict[str, Any]:
    """Submit a task through the API and return the 202 body."""
    response = post(client, "/api/tasks/", {"task": task, **fields})
    assert response.status_code == 202, response.content
    return response.json()


def task_state(client: APIClient, task_id: str) -> str:
    """Return a task's state as the API shows it."""
    return client.get(f"/api/tasks/{task_id}/").json()["state"]


def dead_letter(env: Env, client: APIClient, count: int = 1) -> list[str]:
    """Submit `count` always-failing tasks and run a worker until they are dead-lettered."""
    ids = [submit(client, PERMANENT, max_attempts=1)["id"] for _ in range(count)]
    env.worker("--burst")
    for task_id in ids:
        wait_for(lambda t=task_id: task_state(client, t) == "DEAD_LETTERED")
    return ids
