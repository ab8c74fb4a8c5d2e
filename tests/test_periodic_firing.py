"""Firing schedules on a real Redis: one task per slot with several schedulers, crash windows,
overlap and catch-up policies. Schedulers here are Firing objects in this process; the
real-process test with SIGKILLs is tests/test_periodic_processes.py."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from dtq.conf import dtq_settings
from dtq.engine.connection import get_client
from dtq.engine.cron import Timing
from dtq.engine.errors import InvalidTaskError
from dtq.engine.firing import Firing, Schedule
from dtq.engine.keys import Keys
from dtq.engine.submit import submit
from dtq.result import TaskResult
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand, finalize_by_hand
from tests.script_calls import Scripts
from tests.testapp import tasks  # noqa: F401  (registers the record task)

RECORD = "tests.testapp.tasks.record"


def every_second(**extra: Any) -> Schedule:
    fields: dict[str, Any] = {"name": "beat", "task_name": RECORD, "kwargs": {"value": "tick"}}
    return Schedule(timing=Timing.of(None, timedelta(seconds=1), None), **{**fields, **extra})


def keys() -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, 0)


def log_of(name: str = "beat") -> list[dict[str, Any]]:
    """Return a schedule's firing log, oldest first."""
    rows = get_client().lrange(keys().periodic_log(name), 0, -1)
    return [json.loads(row) for row in reversed(rows)]


def fired(name: str = "beat") -> list[dict[str, Any]]:
    return [row for row in log_of(name) if row["outcome"] == "fired"]


def run_passes(firings: list[Firing], schedules: list[Schedule], seconds: float) -> None:
    """Run each Firing's passes on its own thread for a while, like concurrent schedulers."""
    stop = time.monotonic() + seconds

    def loop(f: Firing) -> None:
        while time.monotonic() < stop:
            f.run_once(get_client(), schedules)
            time.sleep(0.01)

    threads = [threading.Thread(target=loop, args=(f,)) for f in firings]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def redis_ms() -> int:
    seconds, micros = get_client().time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_three_schedulers_fire_each_slot_once(dtq_env):
    schedule = every_second()
    firings = [Firing(keys(), f"s{i}") for i in range(3)]
    run_passes(firings, [schedule], 3.5)
    slots = [row["slot"] for row in fired()]
    assert len(slots) >= 3
    assert slots == list(range(slots[0], slots[-1] + 1, 1000))  # consecutive, none twice
    assert dtq_env.stats()["submitted"] == len(slots)
    for row in fired():  # each firing's task carries its slot in its idempotency key
        task_keys = dtq_env.keys_of(row["task"])
        record = dtq_env.client_of(task_keys).hgetall(task_keys.task(row["task"]))
        assert record["idem"] == f"dtq.periodic:beat:{row['slot']}"


def test_host_clock_is_not_the_reference(dtq_env, monkeypatch):
    schedule = every_second()
    Firing(keys(), "a").run_once(get_client(), [schedule])  # first sight: anchors the cursor
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)  # a host clock far ahead
    wait_for(lambda: Firing(keys(), "a").run_once(get_client(), [schedule]), timeout=3)
    assert len(fired()) == 1


def test_claim_holder_dies_before_submit(dtq_env):
    schedule = every_second()
    first = Firing(keys(), "b")
    first.run_once(get_client(), [schedule])
    slot = schedule.timing.next_after(redis_ms())
    wait_for(lambda: redis_ms() >= slot, timeout=3)
    claim = Scripts.of(get_client()).periodic_claim
    assert claim(keys=[keys().periodic("beat")], args=["dead", slot, 400])[0] == "ok"
    assert Firing(keys(), "b").run_once(get_client(), [schedule]) == 0  # "dead" holds it
    wait_for(lambda: Firing(keys(), "b").run_once(get_client(), [schedule]), timeout=3)
    assert fired()[0]["slot"] == slot
    assert dtq_env.stats()["submitted"] == len(fired())


def test_scheduler_dies_between_submit_and_commit(dtq_env):
    schedule = every_second()
    Firing(keys(), "b").run_once(get_client(), [schedule])
    slot = schedule.timing.next_after(redis_ms())
    wait_for(lambda: redis_ms() >= slot, timeout=3)
    claim = Scripts.of(get_client()).periodic_claim
    assert claim(keys=[keys().periodic("beat")], args=["dead", slot, 400])[0] == "ok"
    orphan = submit(schedule.submission(slot))  # submitted, then the process died
    wait_for(lambda: Firing(keys(), "b").run_once(get_client(), [schedule]), timeout=3)
    assert fired()[0] == {**fired()[0], "slot": slot, "task": orphan.id}
    assert dtq_env.stats()["submitted"] == len(fired())  # the resubmission was absorbed


def test_commit_sent_twice_or_by_a_lost_owner_changes_nothing(dtq_env):
    state, log = keys().periodic("beat"), keys().periodic_log("beat")
    claim, commit = (
        Scripts.of(get_client()).periodic_claim,
        Scripts.of(get_client()).periodic_commit,
    )
    assert claim(keys=[state], args=["a", 5000, 100])[0] == "ok"
    args = ["a", 5000, "fired", "t1", 10, '{"slot":5000}']
    assert commit(keys=[state, log], args=args) == ["ok"]
    assert commit(keys=[state, log], args=args) == ["done"]  # a resend after a lost reply
    assert claim(keys=[state], args=["a", 5000, 100]) == ["done", 5000]
    assert claim(keys=[state], args=["a", 6000, 5000])[0] == "ok"
    assert claim(keys=[state], args=["b", 6000, 5000])[0] == "busy"
    assert commit(keys=[state, log], args=["b", 6000, "skipped", "", 10]) == ["lost", "a"]
    assert get_client().llen(log) == 1
    assert get_client().hget(state, "last_task") == "t1"


def test_overlap_skip_records_why(dtq_env):
    schedule = every_second(overlap="skip")
    run_passes([Firing(keys(), "a")], [schedule], 3.2)  # no worker: the first firing waits
    rows = [row for row in log_of() if row["slot"] > fired()[0]["slot"]]
    assert len(fired()) == 1 and len(rows) >= 2
    assert {row["outcome"] for row in rows} == {"skipped"}
    assert rows[0]["reason"] == f"previous firing {fired()[0]['task']} still QUEUED"
    assert dtq_env.stats()["submitted"] == 1


def test_overlap_buffer_one_fires_the_buffered_slot_after_the_previous_ends(dtq_env):
    schedule = every_second(overlap="buffer_one")
    f = Firing(keys(), "a")
    run_passes([f], [schedule], 3.2)
    outcomes = [row["outcome"] for row in log_of()]
    assert outcomes[:2] == ["fired", "buffered"] and set(outcomes[2:]) == {"skipped"}
    assert log_of()[2]["reason"] == "buffer full"
    buffered = log_of()[1]["slot"]
    (claimed,) = claim_by_hand()
    finalize_by_hand(claimed, "success", "done")
    wait_for(lambda: f.run_once(get_client(), [schedule]) and len(fired()) == 2, timeout=3)
    second = fired()[1]
    assert second["slot"] == buffered
    assert TaskResult.load(second["task"]).state == "QUEUED"
    assert dtq_env.stats()["submitted"] == 2


def test_catch_up_latest_after_an_outage(dtq_env):
    schedule = every_second(catch_up="latest")
    now = redis_ms()
    dtq_env.client.hset(keys().periodic("beat"), "cursor", now - 120_000)  # two minutes down
    Firing(keys(), "a").run_once(get_client(), [schedule])
    rows = log_of()
    assert rows[0]["outcome"] == "skipped" and rows[0]["reason"] == "missed (catch_up=latest)"
    assert rows[0]["from"] == now - 119_000 - (now % 1000)
    assert rows[1]["outcome"] == "fired" and rows[1]["slot"] == rows[0]["slot"] + 1000
    recent = [row["slot"] for row in rows[1:]]
    assert recent == list(range(recent[0], recent[-1] + 1, 1000))
    assert now - recent[-1] < 1500
    assert dtq_env.stats()["submitted"] == len(recent)


def test_paused_schedule_fires_nothing(dtq_env):
    schedule = every_second()
    dtq_env.client.hset(keys().periodic("beat"), mapping={"cursor": 0, "paused": "1"})
    assert Firing(keys(), "a").run_once(get_client(), [schedule]) == 0
    assert log_of() == []


def test_a_schedule_of_an_unknown_task_is_skipped_with_reason(dtq_env):
    schedule = every_second(task_name="no.such.task")
    run_passes([Firing(keys(), "a")], [schedule], 1.6)
    rows = log_of()
    assert rows and {row["outcome"] for row in rows} == {"skipped"}
    assert rows[0]["reason"] == "not submittable: schedule beat: no task named 'no.such.task'"


def test_a_bad_queue_is_refused_at_definition():
    with pytest.raises(InvalidTaskError, match="invalid queue name"):
        every_second(queue="bad queue!")
