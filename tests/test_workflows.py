"""Workflows (chains, groups, chords) on a real Redis with real worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtq
from dtq.engine import ops, workflows
from tests.conftest import Env, wait_for
from tests.testapp import tasks


def finished(env: Env, wf: dtq.WorkflowResult, timeout: float = 20.0) -> dtq.WorkflowResult:
    wait_for(lambda: (wf.refresh(), wf.is_finished)[1], timeout=timeout)
    return wf


def test_chain_passes_each_result_to_the_next_step(dtq_env: Env) -> None:
    dtq_env.worker()
    wf = dtq.chain(tasks.wf_add.s(1, 2), tasks.wf_add.s(10), tasks.wf_add.s(100)).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "SUCCEEDED"
    assert wf.results == [3, 13, 113]
    assert wf.return_value == 113
    runs = dtq_env.witnessed("wf_add")
    assert [r["args"] for r in runs] == [[1, 2], [3, 10], [13, 100]]  # one after another


def test_immutable_step_gets_no_input(dtq_env: Env) -> None:
    dtq_env.worker()
    wf = dtq.chain(tasks.wf_add.s(1, 2), tasks.wf_add.si(5, 5)).enqueue()
    assert finished(dtq_env, wf).results == [3, 10]


def test_chord_callback_gets_results_in_group_order(dtq_env: Env) -> None:
    dtq_env.worker("--concurrency", "4")
    header = dtq.group(tasks.wf_slow.s(i, 0.05 * (5 - i)) for i in range(5))
    wf = dtq.chord(header, tasks.wf_collect.s("extra")).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "SUCCEEDED"
    assert wf.return_value == [0, 1, 2, 3, 4]
    (callback,) = dtq_env.witnessed("wf_collect")
    assert callback["args"] == [[0, 1, 2, 3, 4], "extra"]


def test_group_result_is_the_list_in_order(dtq_env: Env) -> None:
    dtq_env.worker("--concurrency", "4")
    wf = dtq.group(tasks.wf_add.s(i, i) for i in range(6)).enqueue()
    assert finished(dtq_env, wf).return_value == [0, 2, 4, 6, 8, 10]


def test_nesting_chain_of_groups_and_chains(dtq_env: Env) -> None:
    dtq_env.worker("--concurrency", "4")
    inner = dtq.group(
        dtq.chain(tasks.wf_add.s(1), tasks.wf_add.s(1)),  # 2 -> 3 -> 4
        tasks.wf_add.s(10),  # 12
        dtq.group(tasks.wf_add.s(5), tasks.wf_add.s(6)),  # [7, 8]
    )
    wf = dtq.chain(tasks.wf_add.s(1, 1), inner, tasks.wf_collect.s()).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "SUCCEEDED"
    assert wf.return_value == [4, 12, [7, 8]]
    assert wf.members[-1].deps == [2, 3, 4, 5]


def test_group_members_each_get_the_previous_result(dtq_env: Env) -> None:
    dtq_env.worker("--concurrency", "2")
    wf = dtq.chain(tasks.wf_add.s(2, 0), dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2))).enqueue()
    assert finished(dtq_env, wf).return_value == [3, 4]


def test_stop_policy_cancels_the_rest_and_skips_the_callback(dtq_env: Env) -> None:
    dtq_env.worker()
    wf = dtq.chain(tasks.wf_add.s(1, 1), tasks.wf_fail.s(), tasks.wf_add.s(1)).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "FAILED"
    assert [m.state for m in wf.members] == ["SUCCEEDED", "DEAD_LETTERED", "CANCELLED"]
    assert len(dtq_env.witnessed("wf_add")) == 1  # the last step never ran
    assert dtq_env.client.exists(dtq_env.keys.task(wf.members[2].task_id)) == 0


def test_continue_policy_runs_the_callback_with_failures_marked(dtq_env: Env) -> None:
    dtq_env.worker("--concurrency", "3")
    header = dtq.group(tasks.wf_add.s(1, 0), tasks.wf_fail.s(), tasks.wf_add.s(3, 0))
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue(on_failure="continue")
    finished(dtq_env, wf)
    assert wf.state == "FAILED"  # a member failed, though every member ran
    values = wf.members[-1].result
    assert values[0] == 1 and values[2] == 3
    failure = values[1][workflows.FAILED_MARK]
    assert failure["state"] == "DEAD_LETTERED"
    assert failure["task"] == wf.members[1].task_id
    assert "wf_fail always fails" in failure["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_dlq_replay_of_the_failed_step_resumes_the_chain(dtq_env: Env, tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    dtq_env.worker()
    wf = dtq.chain(
        tasks.wf_add.s(1, 1), tasks.wf_fail_unless.si(str(flag)), tasks.wf_add.si(7, 0)
    ).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "FAILED"
    failed = wf.members[1]
    assert failed.state == "DEAD_LETTERED"
    flag.touch()
    actor = ops.Actor(name="tester", source="command")
    ops.replay(failed.task_id, actor=actor)
    wait_for(lambda: (wf.refresh(), wf.state == "SUCCEEDED")[1])
    assert wf.results == [2, "fixed", 7]
    assert len(dtq_env.witnessed("wf_fail_unless")) == 2


def test_cancel_workflow_cancels_waiting_and_running_members(dtq_env: Env) -> None:
    dtq_env.worker()
    wf = dtq.chain(tasks.cancellable.si(30), tasks.wf_add.si(1, 1)).enqueue()
    running = wf.members[0].task_id
    wait_for(lambda: dtq_env.client.hget(dtq_env.keys.task(running), "state") == "RUNNING")
    assert wf.cancel() == "RUNNING"
    wait_for(lambda: dtq_env.client.hget(dtq_env.keys.task(running), "state") == "CANCELLED")
    wf.refresh()
    assert wf.state == "CANCELLED"
    assert [m.state for m in wf.members] == ["CANCELLED", "CANCELLED"]
    assert dtq_env.witnessed("wf_add") == []


def test_fan_in_counts_each_member_once_when_notes_repeat(dtq_env: Env) -> None:
    """The backstop sweep notes members finalize noted already: nothing is counted twice."""
    dtq_env.worker("--concurrency", "4")
    wf = dtq.chord(dtq.group(tasks.wf_add.s(i, 0) for i in range(8)), tasks.wf_collect.s())
    result = wf.enqueue()
    finished(dtq_env, result)
    for _ in range(3):
        workflows.advance(result.id, sweep=True)
    key = dtq_env.keys.workflow(result.id)
    assert dtq_env.client.hget(key, "done") == "9"
    assert len(dtq_env.witnessed("wf_collect")) == 1


def test_bad_input_is_refused_before_anything_is_written(dtq_env: Env) -> None:
    with pytest.raises(dtq.DtqError, match="on_failure"):
        dtq.chain(tasks.wf_add.s(1)).enqueue(on_failure="ignore")
    with pytest.raises(dtq.DtqError, match="expected a signature"):
        dtq.chain(tasks.wf_add.s(1), 42)
    with pytest.raises(dtq.DtqError, match="idempotency key"):
        dtq.chain(tasks.wf_add.using(idempotency_key="k").s(1)).enqueue()
    with pytest.raises(dtq.WorkflowNotFound):
        dtq.WorkflowResult.load("0" * 22)
    assert not list(dtq_env.client.scan_iter(f"{dtq_env.prefix}:*wf*"))


def test_a_callback_whose_inputs_are_too_large_fails_instead_of_waiting(dtq_env: Env) -> None:
    dtq_env.configure(MAX_PAYLOAD_BYTES=200)
    dtq_env.worker("--concurrency", "4")
    header = dtq.group(tasks.wf_add.s(10**15, i) for i in range(20))  # 20 x 16 digits > 200 B
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "FAILED"
    callback = wf.members[-1]
    assert callback.state == "FAILED"
    assert "limit is 200" in callback.error["message"]
    assert dtq_env.witnessed("wf_collect") == []


def test_django_tasks_on_dtq_backend_compose_too(dtq_env: Env) -> None:
    from tests.testapp import django_tasks

    dtq_env.worker()
    first = dtq.signature(django_tasks.add, 1, 2)
    wf = dtq.chain(first, dtq.signature(django_tasks.add, 10), tasks.wf_add.s(100)).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "SUCCEEDED"
    assert wf.results == [3, 13, 113]
    assert [(r["a"], r["b"]) for r in dtq_env.witnessed("dj_add")] == [(1, 2), (3, 10)]


@pytest.mark.django_db(transaction=True)
def test_dlq_replay_resumes_a_stopped_chord_and_reruns_what_the_stop_cancelled(
    dtq_env: Env, tmp_path: Path
) -> None:
    flag = tmp_path / "fixed"
    dtq_env.worker("--concurrency", "2")
    header = dtq.group(
        tasks.wf_fail_unless.si(str(flag)),
        tasks.cancellable.si(1.5),  # running when the stop comes: asked to stop
        tasks.wf_add.si(2, 0),
        tasks.wf_add.si(3, 0),
    )
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "FAILED"
    assert wf.members[0].state == "DEAD_LETTERED"
    wait_for(lambda: (wf.refresh(), wf.members[1].state == "CANCELLED")[1])  # asked to stop
    assert wf.members[4].state == "CANCELLED" and not wf.members[4].submitted
    old_ids = [m.task_id for m in wf.members]
    flag.touch()
    ops.replay(wf.members[0].task_id, actor=ops.Actor(name="tester", source="command"))
    wait_for(lambda: (wf.refresh(), wf.state == "SUCCEEDED")[1], timeout=20)
    assert wf.return_value == ["fixed", "finished", 2, 3]
    assert wf.results == ["fixed", "finished", 2, 3, ["fixed", "finished", 2, 3]]
    (callback,) = dtq_env.witnessed("wf_collect")  # once, after every member was final
    assert callback["args"] == [["fixed", "finished", 2, 3]]
    assert wf.members[0].task_id == old_ids[0]  # the replayed member keeps its id
    assert wf.members[1].task_id != old_ids[1]  # what the stop cancelled ran again, new id
    assert [r["phase"] for r in dtq_env.witnessed("cancellable")].count("start") == 2
    workflows.advance(wf.id, sweep=True)
    assert dtq_env.client.hmget(dtq_env.keys.workflow(wf.id), "done", "bad") == ["5", "0"]


@pytest.mark.django_db(transaction=True)
def test_dlq_replay_resumes_a_stopped_group(dtq_env: Env, tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    dtq_env.worker("--concurrency", "3")
    wf = dtq.group(
        tasks.wf_fail_unless.si(str(flag)), tasks.cancellable.si(1.0), tasks.cancellable.si(1.0)
    ).enqueue()
    finished(dtq_env, wf)
    assert wf.state == "FAILED"
    states = ["DEAD_LETTERED", "CANCELLED", "CANCELLED"]  # the siblings were asked to stop
    wait_for(lambda: (wf.refresh(), [m.state for m in wf.members] == states)[1])
    flag.touch()
    ops.replay(wf.members[0].task_id, actor=ops.Actor(name="tester", source="command"))
    wait_for(lambda: (wf.refresh(), wf.state == "SUCCEEDED")[1], timeout=20)
    assert wf.return_value == ["fixed", "finished", "finished"]
    phases = [r["phase"] for r in dtq_env.witnessed("cancellable")]
    assert phases.count("start") == 4 and phases.count("stopped") == 2  # re-run once each
    assert len(dtq_env.witnessed("wf_fail_unless")) == 2
