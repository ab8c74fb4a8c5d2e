"""Progress from inside a task: bounded write rate, last value written, fenced, shown by the API."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dtq.engine import events, progress, read_side
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand
from tests.test_api_support import api  # noqa: F401
from tests.testapp import tasks


def progress_events(task_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events.recent(count=1000)
        if e["type"] == "TASK_PROGRESS" and e["task"] == task_id
    ]


def stored(task_id: str) -> dict[str, Any] | None:
    record = read_side.get_task(task_id)
    assert record is not None
    return record["progress"]


def test_writes_are_rate_limited_and_the_last_value_lands(dtq_env: Any) -> None:
    task_id = tasks.record.enqueue().id
    [claimed] = claim_by_hand("tests", 1)
    reporter = progress.Reporter(task_id, "tests", claimed["attempt"], interval=0.3)
    for i in range(1, 21):
        reporter.report(i / 20, f"step {i}")
    first = stored(task_id)
    assert first is not None and first["fraction"] == 0.05 and first["message"] == "step 1"
    wait_for(lambda: (stored(task_id) or {}).get("fraction") == 1.0, timeout=3)
    assert stored(task_id)["message"] == "step 20"  # type: ignore[index]
    time.sleep(0.4)
    seen = progress_events(task_id)
    assert [e["progress"]["fraction"] for e in seen] == [0.05, 1.0]  # 20 reports, 2 writes
    assert seen[-1]["progress"]["message"] == "step 20" and seen[-1]["attempt"] == 1


def test_a_resend_writes_nothing_and_a_stale_attempt_is_refused(dtq_env: Any) -> None:
    task_id = tasks.record.enqueue().id
    assert progress.store(task_id, "tests", 1, 0.5, "x") == 0  # still QUEUED: not started
    [claimed] = claim_by_hand("tests", 1)
    assert progress.store(task_id, "tests", claimed["attempt"] + 1, 0.5, "x") == 0
    assert stored(task_id) is None
    assert progress.store(task_id, "tests", claimed["attempt"], 0.5, "x") == 1
    assert progress.store("01zzzzzzzz00zzzzzzzzzz", "tests", 1, 0.5, "x") == 0


def test_a_resent_call_is_absorbed(dtq_env: Any) -> None:
    # The same ARGV twice (a resend after a lost reply): one write, one event.
    from dtq.engine import codec, layout
    from dtq.engine.connection import get_client
    from dtq.engine.read_side.tasks import keys_for
    from tests.script_calls import Scripts

    task_id = tasks.record.enqueue().id
    [claimed] = claim_by_hand("tests", 1)
    k, argv = layout.build(keys_for(task_id), ["tests"], [layout.TaskRef(task_id, "tests")])
    value = codec.dumps({"fraction": 0.25, "message": "m", "at": 1.5})
    args = [*argv, claimed["attempt"], value]
    script = Scripts.of(get_client()).progress
    assert [int(script(keys=k, args=args)), int(script(keys=k, args=args))] == [1, 2]
    assert len(progress_events(task_id)) == 1


@pytest.mark.parametrize(
    ("fraction", "message", "says"),
    [
        (1.5, "", "in 0..1"),
        (-0.1, "", "in 0..1"),
        ("half", "", "a number"),
        (True, "", "a number"),
        (float("nan"), "", "in 0..1"),
        (0.5, 3, "a string"),
    ],
)
def test_bad_values_are_refused_with_a_clear_error(fraction: Any, message: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        progress.check(fraction, message)


def test_a_long_message_is_clipped() -> None:
    assert progress.check(0.5, "x" * 1000) == (0.5, "x" * progress.MAX_MESSAGE)


def test_a_real_worker_stores_progress_and_the_api_shows_it(dtq_env: Any, api: Any) -> None:  # noqa: F811
    sync = tasks.steps.enqueue(5, 0.05)
    asyn = tasks.asteps.enqueue(4)
    dtq_env.worker("--burst").wait(30)
    for result, message in ((sync, "step 5 of 5"), (asyn, "async step 4")):
        wait_for(lambda r=result: (stored(r.id) or {}).get("fraction") == 1.0, timeout=5)
        body = api.client("view").get(f"/api/tasks/{result.id}/").json()
        assert body["state"] == "SUCCEEDED"
        assert body["progress"]["fraction"] == 1.0 and body["progress"]["message"] == message
        assert body["progress"]["at"].endswith("Z")
        assert body["run_seconds"] is not None and body["wait_seconds"] is not None
        assert [r["attempt"] for r in body["attempt_runs"]] == [1]
    listed = api.client("view").get("/api/tasks/", {"q": "task:tests.testapp.tasks.steps"}).json()
    assert listed["results"][0]["progress"]["fraction"] == 1.0


def test_a_django_tasks_context_reports_progress_at_the_same_bounded_rate(dtq_env: Any) -> None:
    sync = tasks.dj_steps.enqueue(20)
    asyn = tasks.dj_asteps.enqueue(20)
    dtq_env.worker("--burst").wait(30)
    for result, message in ((sync, "dj step 20 of 20"), (asyn, "dj async step 20")):
        wait_for(lambda r=result: (stored(r.id) or {}).get("fraction") == 1.0, timeout=5)
        assert stored(result.id)["message"] == message  # type: ignore[index]
        assert read_side.get_task(result.id)["state"] == "SUCCEEDED"  # type: ignore[index]
        # 20 reports in a row: the first is written at once, the last one INTERVAL later.
        fractions = [e["progress"]["fraction"] for e in progress_events(result.id)]
        assert fractions == [0.05, 1.0]


def test_a_django_tasks_context_refuses_a_bad_value() -> None:
    from dtq.djtasks import DtqTaskContext

    context = DtqTaskContext(task_result=None)
    context.progress(0.5, "outside a worker: checked, not stored")
    with pytest.raises(ValueError, match=r"in 0\.\.1"):
        context.progress(2, "")
