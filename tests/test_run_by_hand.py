"""Run a task by hand: the catalogue, argument validation, queue rules, the audit row."""

from __future__ import annotations

from typing import Any

import pytest

from dtq.engine import read_side
from dtq.engine.errors import InvalidTaskError, UnknownQueue
from dtq.engine.manual import catalogue, run_by_hand
from dtq.models import AuditEntry
from tests.ops_support import ACTOR
from tests.test_api_support import api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_catalogue_lists_signatures_and_queues() -> None:
    found = {t["name"]: t for t in catalogue()}
    assert found[tasks.flaky.name]["signature"] == "(failures: int) -> int" or found[
        tasks.flaky.name
    ]["signature"].startswith("(failures: int)")
    assert found[tasks.record.name]["queues"][:2] == ["tests", "other"]


def test_a_run_is_submitted_and_audited(dtq_env: Any) -> None:
    task_id = run_by_hand(
        tasks.record.name, actor=ACTOR, args=[5], queue="other", priority=40, reason="check"
    )
    record = read_side.get_task(task_id)
    assert record is not None and record["queue"] == "other" and record["priority"] == 40
    assert record["payload"] == {"args": [5], "kwargs": {}}
    row = AuditEntry.objects.get()
    assert (row.action, row.outcome, row.task_id, row.queue) == ("submit", "ok", task_id, "other")
    assert row.parameters["args"] == [5] and row.parameters["task"] == tasks.record.name


def test_a_delay_schedules_the_run(dtq_env: Any) -> None:
    task_id = run_by_hand(tasks.record.name, actor=ACTOR, delay=60)
    assert read_side.get_task(task_id)["state"] == "PENDING"  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "change", "says"),
    [
        ("nope.task", {}, "no dtq task named"),
        (tasks.flaky.name, {}, "missing a required argument"),
        (tasks.record.name, {"args": [1, 2]}, "too many positional"),
        (tasks.record.name, {"kwargs": {"x": 1}}, "unexpected keyword"),
        (tasks.record.name, {"queue": "not-accepted"}, "accepts only"),
        (tasks.record.name, {"priority": 101}, "between -100 and 100"),
        (tasks.record.name, {"delay": -1}, "delay must be within"),
    ],
)
def test_bad_runs_are_refused_and_audited(
    dtq_env: Any, name: str, change: dict[str, Any], says: str
) -> None:
    with pytest.raises((InvalidTaskError, UnknownQueue), match=says):
        run_by_hand(name, actor=ACTOR, **change)
    assert read_side.queue_names() == []
    assert AuditEntry.objects.get().outcome == "refused"


def test_the_api_lists_and_runs_with_the_submit_permission(dtq_env: Any, api: Any) -> None:  # noqa: F811
    viewer = api.client("view")
    assert viewer.get("/api/tasks/catalogue/").status_code == 403
    assert post(viewer, "/api/tasks/run/", {"task": tasks.record.name}).status_code == 403
    client = api.client("view", "submit")
    names = [t["name"] for t in client.get("/api/tasks/catalogue/").json()["results"]]
    assert tasks.record.name in names
    assert_error(post(client, "/api/tasks/run/", {"task": tasks.flaky.name}), 400, "invalid")
    response = post(
        client, "/api/tasks/run/", {"task": tasks.flaky.name, "kwargs": {"failures": 0}}
    )
    assert response.status_code == 202, response.content
    task_id = response.json()["id"]
    assert read_side.get_task(task_id)["payload"]["kwargs"] == {"failures": 0}  # type: ignore[index]
    assert AuditEntry.objects.get(outcome="ok").source == "api"
