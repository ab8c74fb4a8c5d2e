"""The worker page (admin and API): what a real worker runs now, for how long, its history."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from dtq.engine import read_side
from tests.conftest import wait_for
from tests.test_admin_pages import operator  # noqa: F401
from tests.test_api_support import api  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_shows_its_running_task_then_its_history(
    dtq_env: Any,
    api: Any,  # noqa: F811
    operator: Any,  # noqa: F811
) -> None:
    done = tasks.record.enqueue("quick")
    held = tasks.steps.enqueue(3, 0.7)
    dtq_env.worker("--concurrency", "2")
    wait_for(lambda: done.refresh() or done.state == "SUCCEEDED")
    wait_for(lambda: (read_side.get_task(held.id) or {}).get("progress"))
    [worker] = read_side.workers()
    client = api.client("view")
    body = client.get(f"/api/workers/{worker['id']}/").json()
    assert body["worker"]["id"] == worker["id"]
    [running] = body["running"]
    assert running["id"] == held.id and running["running_for"] >= 0
    assert running["progress"]["fraction"] > 0
    assert done.id in [t["id"] for t in body["history"]]
    page = operator.get(reverse("admin:dtq_taskqueue_worker", args=[worker["id"]]))
    assert page.status_code == 200 and held.id in page.content.decode()
    listing = operator.get(reverse("admin:dtq_taskqueue_workers")).content.decode()
    assert worker["id"] in listing
    wait_for(lambda: held.refresh() or held.state == "SUCCEEDED", timeout=20)
    after = client.get(f"/api/workers/{worker['id']}/").json()
    assert after["running"] == [] and held.id in [t["id"] for t in after["history"]]


def test_an_unknown_worker_is_404(api: Any, operator: Any, dtq_env: Any) -> None:  # noqa: F811
    assert api.client("view").get("/api/workers/nobody/").status_code == 404
    assert api.client("view").get("/api/workers/bad%20id/").status_code == 404
    assert operator.get(reverse("admin:dtq_taskqueue_worker", args=["nobody"])).status_code == 404
