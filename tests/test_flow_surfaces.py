"""Queue limits changed at run time: engine, REST API, dtq_queue limit and the admin, audited."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq.engine import ops
from dtq.engine.errors import InvalidOperation
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import ACTOR
from tests.test_api_support import api, assert_error  # noqa: F401
from tests.test_flow_control import most_in_one_second, overlap
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def put(client: Any, url: str, data: Any) -> Any:
    return client.generic("PUT", url, json.dumps(data), content_type="application/json")


def test_queue_concurrency_limit_holds_and_clearing_it_wakes_every_waiter(dtq_env: Any) -> None:
    limits = ops.set_queue_limits("reports", actor=ACTOR, max_concurrency=1, reason="db load")
    assert limits["max_concurrency"] == 1
    tasks.paced.using(queue_name="reports").enqueue_many([((0.1,), {}) for _ in range(5)])
    for _ in range(2):
        dtq_env.spawn("dtq_worker", "--queue", "reports", "--concurrency", "4")
    wait_for(lambda: ops.queue_limits("reports")["waiting"] >= 3)
    wait_for(lambda: len([r for r in dtq_env.witnessed("paced") if r["phase"] == "end"]) >= 2)
    assert overlap(dtq_env.witnessed("paced")) == 1
    # Lifted at run time: whoever still waits starts at once, side by side.
    more = [((1.0,), {}) for _ in range(4)]
    ops.set_queue_limits("reports", actor=ACTOR, max_concurrency=1)
    tasks.paced.using(queue_name="reports").enqueue_many(more)
    wait_for(lambda: ops.queue_limits("reports")["waiting"] >= 4)
    after = ops.set_queue_limits("reports", actor=ACTOR, max_concurrency=None)
    assert after["max_concurrency"] is None
    wait_for(lambda: len([r for r in dtq_env.witnessed("paced") if r["phase"] == "end"]) >= 9)
    assert overlap(dtq_env.witnessed("paced")) >= 3
    rows = AuditEntry.objects.filter(action="queue_limit").order_by("id")
    assert [(r.queue, r.parameters["max_concurrency"]) for r in rows] == [
        ("reports", 1),
        ("reports", 1),
        ("reports", None),
    ]
    assert rows[0].reason == "db load"


def test_queue_rate_limit_paces_starts(dtq_env: Any) -> None:
    ops.set_queue_limits("reports", actor=ACTOR, rate="10/s")
    assert ops.queue_limits("reports")["rate"] == "10/s"
    tasks.paced.using(queue_name="reports").enqueue_many([((0,), {}) for _ in range(30)])
    dtq_env.spawn("dtq_worker", "--queue", "reports", "--concurrency", "8", "--with-scheduler")
    wait_for(lambda: len(dtq_env.witnessed("paced")) >= 60, timeout=20)
    claims = sorted(e["ts"] / 1000 for e in dtq_env.events("TASK_STARTED"))
    assert most_in_one_second(claims) <= 10
    assert claims[-1] - claims[0] >= 2.5


def test_bad_queue_limits_are_refused_before_anything_is_written(dtq_env: Any) -> None:
    cases = [
        ({"rate": "10/x"}, "invalid rate '10/x'"),
        ({"rate": "-3/s"}, "invalid rate"),
        ({"max_concurrency": 0}, "max_concurrency must be an int in 1.."),
        ({"max_concurrency": -2}, "max_concurrency must be an int in 1.."),
        ({"burst": 5}, "burst needs a rate"),
    ]
    for changes, message in cases:
        with pytest.raises(InvalidOperation, match=message):
            ops.set_queue_limits("reports", actor=ACTOR, **changes)
    with pytest.raises(InvalidOperation, match="invalid queue name"):
        ops.set_queue_limits("no such queue", actor=ACTOR, max_concurrency=1)
    assert not AuditEntry.objects.exists()
    assert ops.queue_limits("reports")["max_concurrency"] is None


def test_command_sets_shows_and_clears_limits(dtq_env: Any) -> None:
    out = StringIO()
    call_command(
        "dtq_queue", "limit", "reports", "--max-concurrency", "4", "--rate", "5/s", stdout=out
    )
    assert "max concurrency 4" in out.getvalue() and "rate 5/s" in out.getvalue()
    out = StringIO()
    call_command("dtq_queue", "limit", "reports", "--burst", "3", stdout=out)
    assert "rate 5/s (burst 3)" in out.getvalue()
    out = StringIO()
    call_command("dtq_queue", "limit", "reports", "--rate", "none", stdout=out)
    assert "max concurrency 4" in out.getvalue() and "rate none" in out.getvalue()
    out = StringIO()
    call_command("dtq_queue", "limit", "reports", stdout=out)  # only shows
    assert "max concurrency 4" in out.getvalue()
    assert AuditEntry.objects.filter(action="queue_limit", source="command").count() == 3
    for bad in (["--rate", "10/x"], ["--max-concurrency", "-1"]):
        with pytest.raises(CommandError, match=r"rate|max-concurrency"):
            call_command("dtq_queue", "limit", "reports", *bad)


def test_api_reads_and_changes_limits(api: Any) -> None:  # noqa: F811
    client = api.client("view", "pause")
    url = "/api/queues/reports/limits/"
    body = client.get(url).json()
    assert body["max_concurrency"] is None and body["rate"] is None
    changed = put(client, url, {"max_concurrency": 3, "rate": "100/m", "burst": 5, "reason": "r"})
    assert changed.status_code == 200, changed.content
    assert changed.json()["rate"] == "100/m (burst 5)"
    assert client.get(url).json()["max_concurrency"] == 3
    assert client.get("/api/queues/reports/").status_code in (200, 404)
    cleared = put(client, url, {"rate": None})
    assert cleared.json() == {**cleared.json(), "rate": None, "max_concurrency": 3}
    error = assert_error(put(client, url, {"rate": "10/x"}), 400)
    assert "invalid rate" in json.dumps(error)
    assert_error(put(client, url, {"max_concurrency": -1}), 400)
    row = AuditEntry.objects.filter(action="queue_limit", source="api").order_by("id").first()
    assert row is not None and row.reason == "r"
    assert AuditEntry.objects.filter(action="queue_limit").count() == 2


def test_admin_limits_page_changes_limits_and_the_task_page_says_why(dtq_env: Any) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    tasks.paced.using(queue_name="reports").enqueue(0)  # the queue is known from now on
    page = reverse("admin:dtq_taskqueue_queue_limits", args=["reports"])
    assert client.get(page).status_code == 200
    bad = client.post(page, {"max_concurrency": "", "rate": "10/x"})
    assert "invalid rate" in bad.content.decode()
    done = client.post(page, {"max_concurrency": "2", "rate": "20/s", "burst": "4", "reason": "r"})
    assert done.status_code == 302
    assert ops.queue_limits("reports")["rate"] == "20/s (burst 4)"
    overview = client.get(reverse("admin:dtq_taskqueue_changelist")).content.decode()
    assert "concurrency 0/2" in overview and "rate 20/s (burst 4)" in overview
    row = AuditEntry.objects.get(action="queue_limit", source="admin")
    assert row.parameters == {"max_concurrency": 2, "rate": "20/s (burst 4)"}
    # A task held back by a limit: its page says which limit and how full it is.
    blocker = tasks.per_customer.enqueue("acme", 0, 30)
    waiting = tasks.per_customer.enqueue("acme", 1, 0)
    dtq_env.worker("--concurrency", "2")
    wait_for(lambda: len(dtq_env.witnessed("per_customer")) == 1)
    detail = reverse("admin:dtq_taskqueue_task", args=[waiting.id])
    body = wait_for(lambda: "Held by a limit" in (t := client.get(detail).content.decode()) and t)
    assert "waiting: concurrency 1/1 on task tests.testapp.tasks.per_customer key acme" in body
    assert blocker.id


def test_metrics_show_limits_use_and_waiting(api: Any, dtq_env: Any) -> None:  # noqa: F811
    ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=5)
    tasks.per_customer.enqueue("acme", 0, 30)
    tasks.per_customer.enqueue("acme", 1, 0)
    tasks.per_customer.enqueue("acme", 2, 0)
    dtq_env.worker("--concurrency", "4")
    wait_for(lambda: ops.queue_limits("tests")["tasks_waiting"] == 2)
    text = api.client("view").get("/metrics").content.decode()
    family = 'queue="tests",family="tests.testapp.tasks.per_customer"'
    assert f"dtq_limit_slots_held{{{family}}} 1" in text
    assert f"dtq_limit_waiting{{{family}}} 2" in text
    assert f"dtq_limit_max_concurrency{{{family}}} 1" in text
    assert 'dtq_limit_slots_held{queue="tests",family="queue"} 1' in text
    assert 'dtq_queue_limit_max_concurrency{queue="tests"} 5' in text
    assert 'dtq_tasks_limit_waits_total{queue="tests"} 2' in text
    assert "dtq_task_limit_wait_seconds_count" in text


def test_api_task_detail_says_why_a_task_waits(api: Any, dtq_env: Any) -> None:  # noqa: F811
    tasks.per_customer.enqueue("acme", 0, 30)
    waiting = tasks.per_customer.enqueue("acme", 1, 0)
    dtq_env.worker("--concurrency", "2")
    client = api.client("view")

    def reason() -> Any:
        return client.get(f"/api/tasks/{waiting.id}/").json().get("waiting")

    assert wait_for(reason).startswith("waiting: concurrency 1/1 on task ")
