"""Contract tests of the schedule endpoints: list, detail, create/edit/delete, pause, resume,
run now; audited, permission-checked, clear errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dtq import schedules
from dtq.engine.firing import Schedule
from dtq.models import AuditEntry, PeriodicSchedule
from tests.test_api_support import RECORD, api, assert_error, post  # noqa: F401
from tests.test_periodic_firing import every_second

pytestmark = pytest.mark.django_db(transaction=True)  # audit rows commit on their own connection

NEW = {"name": "nightly", "task": RECORD, "cron": "30 2 * * *", "timezone": "Europe/Paris"}


@pytest.fixture
def beat(dtq_env) -> Iterator[Schedule]:
    schedule = every_second()
    schedules.register(schedule)
    yield schedule
    schedules.unregister(schedule.name)


@pytest.fixture
def client(api):  # noqa: F811
    return api.client("view", "schedules")


def test_list_and_detail(beat, client):
    listing = client.get("/api/schedules/").json()["results"]
    assert [row["name"] for row in listing] == ["beat"]
    row = listing[0]
    assert row["source"] == "code" and row["every_seconds"] == 1.0 and row["paused"] is False
    assert len(row["next_fires"]) == 1
    detail = client.get("/api/schedules/beat/").json()
    assert len(detail["next_fires"]) == 10
    assert_error(client.get("/api/schedules/nope/"), 404, "schedule_not_found")


def test_create_edit_delete_a_database_schedule_audited(dtq_env, client):
    created = post(client, "/api/schedules/", NEW)
    assert created.status_code == 201, created.content
    assert created.json()["source"] == "database"
    changed = client.patch("/api/schedules/nightly/", {"kwargs": {"value": 2}}, format="json")
    assert changed.status_code == 200 and changed.json()["kwargs"] == {"value": 2}
    assert PeriodicSchedule.objects.get().kwargs == {"value": 2}
    assert client.delete("/api/schedules/nightly/").status_code == 204
    rows = AuditEntry.objects.order_by("id")
    assert [r.parameters["change"] for r in rows] == ["added", "changed", "deleted"]
    assert {r.action for r in rows} == {"periodic_edit"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"kwargs": {"nope": 1}}, "arguments do not fit"),
        ({"task": "no.such.task"}, "no task named"),
        ({"cron": "", "every_seconds": None}, "exactly one of"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"name": "has space"}, "letters, digits"),
    ],
)
def test_bad_definitions_are_400_saying_why(dtq_env, client, fields, message):
    error = assert_error(post(client, "/api/schedules/", {**NEW, **fields}), 400, "invalid")
    assert message in str(error["details"])
    assert PeriodicSchedule.objects.count() == 0


def test_code_schedules_are_read_only(beat, client):
    response = client.patch("/api/schedules/beat/", {"kwargs": {}}, format="json")
    assert_error(response, 409, "read_only")
    assert_error(client.delete("/api/schedules/beat/"), 409, "read_only")


def test_pause_resume_run_are_audited_and_need_the_permission(beat, client, api):  # noqa: F811
    viewer = api.client("view")
    assert_error(post(viewer, "/api/schedules/beat/pause/"), 403)
    assert post(client, "/api/schedules/beat/pause/", {"reason": "deploy"}).json() == {
        "name": "beat",
        "changed": True,
    }
    assert client.get("/api/schedules/beat/").json()["paused"] is True
    assert post(client, "/api/schedules/beat/resume/").json()["changed"] is True
    run = post(client, "/api/schedules/beat/run/").json()
    assert run["changed"] is True and run["task_id"]
    firings = client.get("/api/schedules/beat/").json()["firings"]
    assert firings[0]["task"] == run["task_id"] and firings[0]["task_state"] == "QUEUED"
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "source"))
    assert actions == [
        ("periodic_pause", "api"),
        ("periodic_resume", "api"),
        ("periodic_run", "api"),
    ]
