"""Declared queues (DTQ['QUEUES']): no surface creates a queue, every one names the allowed."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

import dtq
from dtq.checks import check_settings
from dtq.engine import ops, read_side
from dtq.engine.declared import declared
from dtq.engine.errors import UnknownQueue
from dtq.engine.reaper import Reaper
from tests.ops_support import ACTOR, dead_letter_by_hand
from tests.test_api_support import PERMANENT, api, assert_error, post  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@dtq.task(name="tests.declared.picky", queue_name="tests", queues=["picky-b"])
def picky() -> None:
    """A task that accepts its own queue and one other."""


def nothing_of(dtq_env, queue: str) -> None:
    """Check that no key of the queue exists and it is not registered."""
    assert queue not in read_side.queue_names()
    assert not list(dtq_env.client.scan_iter(f"{dtq_env.prefix}:*:{queue}*"))


def test_unset_queues_are_the_default_plus_every_queue_a_task_names(dtq_env):
    names = declared()
    assert {"default", "tests", "perf", "picky-b", "other"} <= names
    assert "nowhere" not in names


def test_code_cannot_enqueue_to_an_undeclared_queue(dtq_env):
    with pytest.raises(UnknownQueue, match=r"'nowhere' is not declared.*allowed: .*tests"):
        tasks.hold.using(queue_name="nowhere").enqueue(1)
    nothing_of(dtq_env, "nowhere")


def test_explicit_queues_are_the_only_ones(dtq_env):
    dtq_env.configure(QUEUES=["default", "tests"])
    tasks.hold.enqueue(0)
    with pytest.raises(UnknownQueue, match=r"allowed: default, tests$"):
        tasks.record.using(queue_name="other").enqueue()
    nothing_of(dtq_env, "other")


def test_a_queue_undeclared_after_a_submit_is_refused_on_the_next(dtq_env):
    # A submit remembers the options it checked; a setting change must make it check again.
    other = tasks.record.using(queue_name="other")
    other.enqueue()
    other.enqueue_many([((), {})])
    dtq_env.configure(QUEUES=["default", "tests"])
    with pytest.raises(UnknownQueue, match=r"'other' is not declared"):
        other.enqueue()
    with pytest.raises(dtq.BulkSubmitError) as refused:
        other.enqueue_many([((), {})])
    assert isinstance(refused.value.errors[0], UnknownQueue)
    assert read_side.queue_overview("other")["queued"] == 2


def test_a_task_that_names_its_queues_accepts_only_those(dtq_env):
    picky.using(queue_name="picky-b").enqueue()
    with pytest.raises(UnknownQueue, match=r"not accepted by task 'tests\.declared\.picky'"):
        picky.using(queue_name="other").enqueue()  # declared, but not this task's
    assert read_side.queue_overview("picky-b")["queued"] == 1


def test_api_routes_a_task_only_to_its_queues_and_priorities(api, dtq_env):  # noqa: F811
    client = api.client("submit", "view")
    # `permanent` names no other queue: through the API it goes to its own queue only.
    reply = post(client, "/api/tasks/", {"task": PERMANENT, "queue_name": "other"})
    error = assert_error(reply, 400, "invalid")
    assert error["details"]["fields"]["queue_name"] == [f"task {PERMANENT!r} accepts only: tests"]
    reply = post(client, "/api/tasks/", {"task": PERMANENT, "priority": 90})
    assert "at most 0" in assert_error(reply, 400, "invalid")["details"]["fields"]["priority"][0]
    reply = post(client, "/api/tasks/", {"task": PERMANENT, "priority": -90})
    assert reply.status_code == 202
    nothing_of(dtq_env, "other")


def test_pausing_an_unknown_queue_is_refused_everywhere(api, dtq_env):  # noqa: F811
    with pytest.raises(UnknownQueue):
        ops.pause_queue("nowhere", actor=ACTOR)
    reply = post(api.client("pause"), "/api/queues/nowhere/pause/")
    assert "allowed: " in assert_error(reply, 400, "invalid")["message"]
    with pytest.raises(CommandError, match="not declared"):
        call_command("dtq_queue", "pause", "nowhere", stdout=io.StringIO())
    operator = Client()
    operator.force_login(api.user("pause", "view", is_staff=True))
    url = reverse("admin:dtq_taskqueue_queue_pause", args=["nowhere"])
    page = operator.post(url, follow=True).content.decode()
    assert "not declared" in page
    nothing_of(dtq_env, "nowhere")

    # A queue that exists although it is no longer declared can still be paused and resumed.
    tasks.hold.enqueue(0)
    dtq_env.configure(QUEUES=["default"])
    assert ops.pause_queue("tests", actor=ACTOR) is True
    assert ops.resume_queue("tests", actor=ACTOR) is True


def test_replay_into_an_undeclared_queue_is_refused(api, dtq_env):  # noqa: F811
    tasks.record.enqueue()
    [task_id] = dead_letter_by_hand(1)
    with pytest.raises(UnknownQueue):
        ops.replay(task_id, actor=ACTOR, to_queue="nowhere")
    with pytest.raises(UnknownQueue):
        ops.replay_many("tests", actor=ACTOR, to_queue="nowhere")
    reply = post(api.client("replay"), f"/api/dlq/{task_id}/replay/", {"to_queue": "nowhere"})
    assert_error(reply, 400, "invalid")
    assert read_side.queue_overview("tests")["dlq"] == 1
    nothing_of(dtq_env, "nowhere")
    assert ops.replay(task_id, actor=ACTOR, to_queue="other") == "replayed"


def test_queue_settings_are_checked(settings):
    def ids(**dtq_values):
        settings.DTQ = {**settings.DTQ, **dtq_values}
        return [e.id for e in check_settings()]

    assert ids(QUEUES=None) == []
    assert ids(QUEUES="tests") == ["dtq.E016"]
    assert ids(QUEUES=["tests", "bad name"]) == ["dtq.E016"]
    assert ids(QUEUES=["tests"]) == ["dtq.E017"]  # the default queue is missing
    warned = ids(QUEUES=["default", "tests", "perf"])
    assert warned and set(warned) == {"dtq.W005"}  # `record` and `picky` name other queues


def test_the_reaper_forgets_empty_undeclared_queues_only(dtq_env):
    for queue in ("other", "qa", "qb", "qc"):
        tasks.record.using(queue_name=queue).enqueue()
    tasks.record.using(queue_name="q1").enqueue()
    for queue in ("other", "qa", "qb"):
        dtq_env.client.delete(dtq_env.keys.index(queue, "QUEUED"))  # as retention leaves it
        for band in range(3):
            dtq_env.client.delete(dtq_env.keys.stream(queue, band))
    dtq_env.client.sadd(dtq_env.keys.paused, "qb")
    dtq_env.configure(QUEUES=["default", "tests", "qa"])
    assert Reaper().forget_unused_queues() == 1  # other: undeclared and empty
    names = read_side.queue_names()
    assert "other" not in names
    assert {"qa", "qb", "qc", "q1"} <= set(names)  # declared, paused, holding tasks
    assert not dtq_env.client.exists(dtq_env.keys.stats("other"))
    assert Reaper().forget_unused_queues() == 0


def test_the_forget_sweep_takes_turns_over_many_queues(dtq_env, monkeypatch):
    monkeypatch.setattr("dtq.engine.reaper.FORGET_BATCH", 2)
    for queue in ("qa", "qb", "qc"):
        tasks.record.using(queue_name=queue).enqueue()  # all three keep a task
    dtq_env.client.sadd(dtq_env.keys.queues, "zz-empty")  # left over by an older version
    dtq_env.configure(QUEUES=["default", "tests"])
    reaper = Reaper()
    assert reaper.forget_unused_queues() == 0  # qa, qb
    assert reaper.forget_unused_queues() == 1  # qc, zz-empty
    assert "zz-empty" not in read_side.queue_names()
