"""The workflow parts of the scripts, driven by hand: counted once, safe to receive twice."""

from __future__ import annotations

from typing import Any

import pytest

import dtq
from dtq.engine import codec, gateway, layout, ops, workflows
from dtq.engine.connection import get_client
from dtq.engine.direct import call_script
from dtq.engine.scripts import script
from tests.conftest import Env, wait_for
from tests.ops_support import claim_by_hand, keys
from tests.script_calls import Scripts
from tests.testapp import tasks


def finalize_twice(
    claimed: dict[str, Any], workflow_id: str, result: Any, outcome: str = "success", times: int = 2
) -> list[Any]:
    """Send one finalize call of a member twice (a resend after a lost reply)."""
    member = codec.loads(get_client().hget(keys().task(claimed["id"]), "payload"))["wfm"]
    scripts = Scripts.of(get_client())
    ref = layout.TaskRef(claimed["id"], "tests", claimed["idem"])
    k, argv = layout.build(keys(), ["tests"], [ref], [workflow_id], layout=layout.of("finalize"))
    history = codec.dumps({"attempt": claimed["attempt"], "outcome": outcome})
    args = [1, claimed["band"], claimed["entry"], claimed["attempt"], outcome]
    args += [codec.dumps(result), history, 0]
    trailer = layout.workflow_trailer([workflow_id], [(workflow_id, member)])
    call = [*argv, "1", claimed["worker"], *args, *trailer]
    return [scripts.finalize(keys=k, args=call) for _ in range(times)]


def test_finalize_sent_twice_counts_the_member_once(dtq_env: Env) -> None:
    wf = dtq.chord(dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2)), tasks.wf_collect.s())
    result = wf.enqueue()
    wk = dtq_env.keys.workflow(result.id)
    first = claim_by_hand(n=1)[0]
    assert finalize_twice(first, result.id, 10) == [["SUCCEEDED", 0], ["SUCCEEDED", 1]]
    assert dtq_env.client.hget(wk, "done") == "1"
    assert dtq_env.client.hget(wk, "n:2") == "1"  # the callback still waits for one input
    second = claim_by_hand(n=1)[0]
    assert finalize_twice(second, result.id, 20) == [["SUCCEEDED", 0], ["SUCCEEDED", 1]]
    assert dtq_env.client.hget(wk, "done") == "2"
    assert dtq_env.client.hget(wk, "n:2") == "0"
    assert dtq_env.client.smembers(dtq_env.keys.workflow_ready(result.id)) == {"2"}
    # Releasing twice submits the callback once: its id is fixed, submit.lua absorbs the rest.
    workflows.advance(result.id)
    dtq_env.client.sadd(dtq_env.keys.workflow_ready(result.id), "2")
    workflows.advance(result.id)
    result.refresh()
    callback = result.members[2].task_id
    submitted = [e for e in dtq_env.events("TASK_SUBMITTED") if e["task"] == callback]
    assert len(submitted) == 1
    record = dtq_env.client.hgetall(dtq_env.keys.task(callback))
    by_task = {first["id"]: 10, second["id"]: 20}
    expected = [by_task[result.members[0].task_id], by_task[result.members[1].task_id]]
    assert codec.loads(record["payload"])["args"] == [expected]


def test_sync_sent_twice_counts_once_and_keeps_a_fresh_due_entry(dtq_env: Env) -> None:
    result = dtq.chain(tasks.wf_add.s(1), tasks.wf_add.s(2)).enqueue()
    first = claim_by_hand(n=1)[0]
    client = get_client()
    # The member ends by a path that does not count (as claim.lua's expiry): only its record.
    client.hset(dtq_env.keys.task(first["id"]), mapping={"state": "CANCELLED"})
    k = dtq_env.keys
    member = [(0, first["id"], "tests")]
    seen = client.zscore(k.workflows_due, result.id)
    for _ in range(2):
        reply = workflows._sync(client, k, result.id, member, seen, 30_000)
    assert reply[0] == "FAILED"  # policy stop: a cancelled member stops the chain
    wk = k.workflow(result.id)
    assert client.hget(wk, "done") == "1" and client.hget(wk, "bad") == "1"
    assert client.zscore(k.workflows_due, result.id) != seen  # due now: advance must look
    # With nothing new, a sync reschedules the look only if the score is still the one read.
    now_seen = client.zscore(k.workflows_due, result.id)
    workflows._sync(client, k, result.id, [], now_seen - 1, -1)
    assert client.zscore(k.workflows_due, result.id) == now_seen
    workflows._sync(client, k, result.id, [], now_seen, -1)
    assert client.zscore(k.workflows_due, result.id) is None


def test_cancel_sent_twice_counts_once(dtq_env: Env, monkeypatch: Any) -> None:
    result = dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2)).enqueue(on_failure="continue")
    client = get_client()
    replies: list[Any] = []

    def twice(client: Any, name: str, call: Any) -> Any:  # a resend after a lost reply
        replies.append(call_script(client, script(name), *call))
        replies.append(call_script(client, script(name), *call))
        return replies[-1]

    monkeypatch.setattr(gateway, "_call", twice)
    task_id = result.members[0].task_id
    reply = workflows.cancel_task_in_workflow(
        client, dtq_env.keys, task_id, "tests", (result.id, 0), "by hand"
    )
    assert reply.kind == "cancelled" and replies == [["cancelled"], ["cancelled"]]
    wk = dtq_env.keys.workflow(result.id)
    assert client.hget(wk, "done") == "1" and client.hget(wk, "s:0") == "CANCELLED"
    assert len(dtq_env.events("TASK_CANCELLED")) == 1


def test_workflow_keys_share_the_members_hash_slot(dtq_env: Env) -> None:
    result = dtq.group(tasks.wf_add.s(1)).enqueue()
    k = dtq_env.keys
    names = [k.workflow(result.id), k.workflow_ready(result.id), k.workflows_due]
    names += [k.task(result.members[0].task_id), k.stream("tests", 1)]
    tags = {name.split("{")[1].split("}")[0] for name in names}
    assert tags == {"0"}


def test_reclaim_to_the_dlq_counts_the_member_and_stops_the_chain(dtq_env: Env) -> None:
    from dtq.engine.reaper import Reaper

    result = dtq.chain(tasks.wf_fail.s(), tasks.wf_add.s(1)).enqueue()  # max_attempts 1
    claimed = claim_by_hand(n=1)[0]
    client = get_client()
    client.hset(dtq_env.keys.task(claimed["id"]), "lease", 1)  # its worker died long ago
    client.zadd(dtq_env.keys.index("tests", "RUNNING"), {claimed["id"]: 1})
    assert Reaper().reclaim_expired_leases() == 1
    wk = dtq_env.keys.workflow(result.id)
    assert client.hget(wk, "s:0") == "DEAD_LETTERED"
    assert "stopped renewing" in codec.loads(client.hget(wk, "e:0"))["message"]
    result.refresh()
    assert result.state == "FAILED"
    assert [m.state for m in result.members] == ["DEAD_LETTERED", "CANCELLED"]


@pytest.mark.django_db(transaction=True)
def test_replayed_success_sent_twice_releases_the_stopped_siblings_once(dtq_env: Env) -> None:
    """A stopped chord resumes on the replay's success: what the stop cancelled runs again once."""
    header = dtq.group(tasks.wf_add.s(1), tasks.wf_add.s(2), tasks.wf_add.s(3))
    result = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    client, k = get_client(), dtq_env.keys
    wk, ready = k.workflow(result.id), k.workflow_ready(result.id)
    failing = claim_by_hand(n=1)[0]
    member = codec.loads(client.hget(k.task(failing["id"]), "payload"))["wfm"]
    error = {"class": "Boom", "message": "boom"}
    finalize_twice(failing, result.id, error, outcome="fail", times=1)
    workflows.advance(result.id)  # the stop cancels the two queued siblings
    siblings = [m for m in range(3) if m != member]
    old_ids = {m: client.hget(wk, f"t:{m}") for m in siblings}
    assert [client.hget(wk, f"s:{m}") for m in siblings] == ["CANCELLED", "CANCELLED"]
    assert client.hmget(wk, "state", "done", "bad", "halted") == ["FAILED", "3", "3", "2"]
    ops.replay(failing["id"], actor=ops.Actor(name="tester", source="command"))
    replayed = claim_by_hand(n=1)[0]
    assert replayed["id"] == failing["id"]
    finalize_twice(replayed, result.id, 10 * (member + 1))  # the success, sent twice
    assert client.hmget(wk, "state", "done", "bad", "halted") == ["RUNNING", "1", "0", "0"]
    assert client.smembers(ready) == {str(m) for m in siblings}
    new_ids = {m: client.hget(wk, f"t:{m}") for m in siblings}
    for m in siblings:  # new ids, in the workflow's hash slot
        assert new_ids[m] != old_ids[m] and new_ids[m][10:] == old_ids[m][10:]
    assert client.hget(wk, "n:3") == "2"  # the callback waits for the siblings' new runs
    assert len(dtq_env.events("WORKFLOW_FAILED")) == len(dtq_env.events("WORKFLOW_RUNNING")) == 1
    workflows.advance(result.id)
    workflows.advance(result.id)
    for m in siblings:
        submitted = [e for e in dtq_env.events("TASK_SUBMITTED") if e["task"] == new_ids[m]]
        assert len(submitted) == 1
    # A late note about a sibling's old, cancelled task changes nothing now.
    workflows._sync(client, k, result.id, [(siblings[0], old_ids[siblings[0]], "tests")], None, 0)
    assert client.hmget(wk, "done", "bad") == ["1", "0"]
    dtq_env.worker()
    wait_for(lambda: (result.refresh(), result.is_finished)[1])
    assert result.state == "SUCCEEDED"
    assert result.return_value == [10 * (m + 1) if m == member else m + 1 for m in range(3)]
    assert len(dtq_env.witnessed("wf_collect")) == 1
