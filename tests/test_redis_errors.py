"""Redis errors on the API and the admin pages: 503 only when Redis is down, never a password."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.test_api_support import api, assert_error  # noqa: F401

pytestmark = pytest.mark.django_db
PASSWORD = "hunter2-not-for-output"


def refused_url(env) -> str:
    """A Redis that is up but refuses every command: a database index it does not have."""
    return env.url.rsplit("/", 1)[0] + "/999"


def unreachable_url() -> str:
    """A Redis URL with a password where nothing listens (connection refused)."""
    return f"redis://:{PASSWORD}@127.0.0.1:1/0"


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_an_api_command_redis_refuses_is_a_400_naming_the_refusal(api, settings):  # noqa: F811
    client = api.client("view")
    settings.DTQ = {**settings.DTQ, "REDIS_URL": refused_url(api.env)}
    error = assert_error(client.get("/api/queues/"), 400, "redis_refused")
    assert error["message"].startswith("Redis refused the request: ResponseError")


@pytest.mark.slow
def test_an_unreachable_redis_is_a_503_without_the_password(api, settings):  # noqa: F811
    client = api.client("view")
    settings.DTQ = {**settings.DTQ, "REDIS_URL": unreachable_url()}  # retried for ~3 s
    response = client.get("/api/queues/")
    assert_error(response, 503, "redis_unavailable")
    assert response["Retry-After"] == "1"
    assert PASSWORD not in response.content.decode()


@pytest.mark.parametrize("page", ["changelist", "tasks", "dlq"])
def test_an_admin_page_redis_refuses_is_a_400_page(dtq_env, operator, settings, page):
    settings.DTQ = {**settings.DTQ, "REDIS_URL": refused_url(dtq_env)}
    response = operator.get(reverse(f"admin:dtq_taskqueue_{page}"))
    assert response.status_code == 400
    assert "Redis refused the request" in response.content.decode()
    assert "DB index is out of range" in response.content.decode()


@pytest.mark.slow
def test_an_unreachable_redis_is_a_503_admin_page_without_the_password(operator, settings):
    settings.DTQ = {**settings.DTQ, "REDIS_URL": unreachable_url()}
    response = operator.get(reverse("admin:dtq_taskqueue_tasks"))
    assert response.status_code == 503
    page = response.content.decode()
    assert "Redis is not reachable" in page and PASSWORD not in page


@pytest.mark.django_db
def test_a_newline_in_an_api_path_is_a_json_404(client):
    response = client.post("/api/dlq/%0AR/discard/")
    assert response.status_code in (401, 403, 404)
    assert response["Content-Type"].startswith("application/json")
