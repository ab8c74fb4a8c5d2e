"""Edit and replay: a dead-lettered task's arguments, queue and priority corrected, audited."""

from __future__ import annotations

from typing import Any

import pytest

from dtq.engine import read_side
from dtq.engine.dlq import replay_entries
from dtq.engine.edit import check_arguments, edit_and_replay, signature
from dtq.engine.errors import InvalidTaskError, NotInDeadLetterQueue, PayloadError
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import ACTOR, dead_letter_by_hand
from tests.test_api_support import api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def dead(*args: Any, **kwargs: Any) -> str:
    task_id = tasks.record.enqueue(*args, **kwargs).id
    assert dead_letter_by_hand(1) == [task_id]
    return task_id


def test_the_edit_is_replayed_run_and_audited_before_and_after(dtq_env: Any) -> None:
    task_id = dead(1)
    status = edit_and_replay(task_id, actor=ACTOR, args=[2], priority=60, reason="typo")
    assert status == "replayed"
    record = read_side.get_task(task_id)
    assert record is not None and record["state"] == "QUEUED"
    assert record["payload"] == {"args": [2], "kwargs": {}}
    assert (record["priority"], record["band"]) == (60, 0)
    row = AuditEntry.objects.get()
    assert (row.action, row.outcome, row.affected, row.reason) == ("replay", "ok", 1, "typo")
    edit = row.parameters["edit"]
    assert edit["before"] == {"args": [1], "kwargs": {}, "queue": "tests", "priority": 0}
    assert edit["after"] == {"args": [2], "kwargs": {}, "queue": "tests", "priority": 60}
    dtq_env.worker("--burst").wait(30)
    wait_for(lambda: read_side.get_task(task_id)["state"] == "SUCCEEDED")  # type: ignore[index]
    assert read_side.get_task(task_id)["result"] == 2  # type: ignore[index]


def test_a_new_queue_and_keyword_arguments(dtq_env: Any) -> None:
    task_id = dead(1)
    edit_and_replay(task_id, actor=ACTOR, args=[], kwargs={"value": "x"}, queue="other")
    record = read_side.get_task(task_id)
    assert record is not None and record["queue"] == "other" and record["state"] == "QUEUED"
    assert record["payload"] == {"args": [], "kwargs": {"value": "x"}}


@pytest.mark.parametrize(
    ("change", "error", "says"),
    [
        ({"args": [1, 2]}, InvalidTaskError, "arguments do not fit"),
        ({"kwargs": {"nope": 1}}, InvalidTaskError, "unexpected keyword"),
        ({"args": {"a": 1}}, InvalidTaskError, "must be a JSON array"),
        ({"priority": 101}, InvalidTaskError, "between -100 and 100"),
        ({"priority": "high"}, InvalidTaskError, "between -100 and 100"),
        ({"queue": "bad/queue"}, InvalidTaskError, "invalid queue name"),
        ({"queue": "not-accepted"}, InvalidTaskError, "accepts only"),
        ({"args": ["x" * 70_000]}, PayloadError, "limit"),
    ],
)
def test_a_bad_edit_changes_nothing_and_is_audited_refused(
    dtq_env: Any, change: dict[str, Any], error: type[Exception], says: str
) -> None:
    task_id = dead(1)
    with pytest.raises(error, match=says):
        edit_and_replay(task_id, actor=ACTOR, **change)
    record = read_side.get_task(task_id)
    assert record is not None and record["state"] == "DEAD_LETTERED"
    assert record["payload"] == {"args": [1], "kwargs": {}}
    assert AuditEntry.objects.get().outcome == "refused"


def test_a_resent_edit_replays_once(dtq_env: Any) -> None:
    task_id = dead(1)
    entry = read_side.find_dlq_entry(task_id)
    assert entry is not None
    edit = '{"payload": "{\\"args\\":[5],\\"kwargs\\":{}}", "priority": 0, "band": 1}'
    assert replay_entries("tests", [entry], None, [edit]) == ["replayed"]
    assert replay_entries("tests", [entry], None, [edit]) == ["done"]  # it happened: not "gone"
    assert read_side.get_task(task_id)["history"][-1]["outcome"] == "replayed"  # type: ignore[index]


def test_only_dead_lettered_tasks_are_edited(dtq_env: Any) -> None:
    task_id = tasks.record.enqueue(1).id
    with pytest.raises(NotInDeadLetterQueue):
        edit_and_replay(task_id, actor=ACTOR, args=[2])


def test_signatures_leave_out_the_context() -> None:
    assert signature(tasks.record) == "(value: object = None)"
    check_arguments(tasks.record, [], {})
    with pytest.raises(InvalidTaskError, match="missing a required argument"):
        check_arguments(tasks.flaky, [], {})


def test_the_api_edits_and_replays(dtq_env: Any, api: Any) -> None:  # noqa: F811
    task_id = dead(1)
    viewer = api.client("view")
    url = f"/api/dlq/{task_id}/edit/"
    assert post(viewer, url, {"args": [2]}).status_code == 403
    client = api.client("view", "replay")
    assert_error(post(client, url, {"args": [1, 2, 3]}), 400, "invalid")
    response = post(client, url, {"args": [3], "priority": 10, "reason": "fixed"})
    assert response.status_code == 200, response.content
    assert response.json() == {"task_id": task_id, "outcome": "replayed"}
    assert read_side.get_task(task_id)["payload"]["args"] == [3]  # type: ignore[index]
