"""Bulk submission: Task.enqueue_many / aenqueue_many over the pipelined submit path."""

import asyncio
import dataclasses
from datetime import timedelta

import pytest
import redis

import dtq
from dtq.engine import codec, direct, gateway, ids, shards, submit
from dtq.engine.connection import get_client, routed
from dtq.engine.errors import InvalidTaskError, PayloadError
from dtq.options import InvalidOption
from tests.script_calls import Scripts
from tests.testapp import tasks


def _stream_len(dtq_env) -> int:
    return dtq_env.total(lambda client, keys: client.xlen(keys.stream("tests", 1)))


def _refreshed(result):
    result.refresh()
    return result


def test_enqueue_many_accepts_every_call_in_order(dtq_env):
    results = tasks.record.enqueue_many([((i,), {}) for i in range(3)] + [((), {"value": 9})])
    assert [r.state for r in results] == [dtq.TaskState.QUEUED] * 4
    assert len({r.id for r in results}) == 4
    payloads = [_refreshed(r).record["payload"] for r in results]
    assert payloads == [{"args": [i], "kwargs": {}} for i in range(3)] + [
        {"args": [], "kwargs": {"value": 9}}
    ]
    assert _stream_len(dtq_env) == 4
    assert dtq_env.stats()["active"] == 4


def test_enqueue_many_of_nothing_is_a_no_op(dtq_env):
    assert tasks.record.enqueue_many([]) == []


def test_enqueue_many_spans_several_round_trips(dtq_env, monkeypatch):
    monkeypatch.setattr("dtq.engine.submit.MANY_CHUNK", 7)
    results = tasks.record.enqueue_many(((i,), {}) for i in range(20))
    assert len(results) == 20
    assert _stream_len(dtq_env) == 20


def test_one_invalid_item_submits_nothing_and_names_it(dtq_env):
    calls = [((1,), {}), ((object(),), {}), ((2,), {}), (("x" * 200,), {})]
    dtq_env.configure(MAX_PAYLOAD_BYTES=100)
    with pytest.raises(dtq.BulkSubmitError, match="nothing was submitted") as info:
        tasks.record.enqueue_many(calls)
    assert sorted(info.value.errors) == [1, 3]
    assert isinstance(info.value.errors[1], PayloadError)
    assert "JSON-serializable" in str(info.value.errors[1])
    assert "item 3" in str(info.value)
    assert info.value.results == [None] * 4
    assert _stream_len(dtq_env) == 0


@pytest.mark.parametrize(
    "call, message",
    [
        ((1, 2, 3), "expected an \\(args, kwargs\\) pair"),
        ("ab", "expected an \\(args, kwargs\\) pair"),
        ((1, {}), "got \\(int, dict\\)"),
        (((1,), [2]), "got \\(tuple, list\\)"),
    ],
)
def test_malformed_items_are_refused_before_any_write(dtq_env, call, message):
    with pytest.raises(InvalidTaskError, match="item 1: .*" + message):
        tasks.record.enqueue_many([((1,), {}), call])
    assert _stream_len(dtq_env) == 0


def test_an_idempotency_key_is_refused_in_bulk(dtq_env):
    with pytest.raises(InvalidTaskError, match="use enqueue"):
        tasks.record.using(idempotency_key="k1").enqueue_many([((1,), {})])


@pytest.mark.one_shard  # QUEUE_MAX_DEPTH counts per shard
def test_a_full_queue_refuses_the_rest_and_keeps_the_accepted(dtq_env):
    dtq_env.configure(QUEUE_MAX_DEPTH={"tests": 2})
    with pytest.raises(dtq.BulkSubmitError, match="2 of 4 submissions refused, 2 accepted") as info:
        tasks.record.enqueue_many([((i,), {}) for i in range(4)])
    err = info.value
    assert err.submitted
    assert sorted(err.errors) == [2, 3]
    assert all(isinstance(e, dtq.QueueFull) for e in err.errors.values())
    accepted = [r for r in err.results if r is not None]
    assert len(accepted) == 2
    assert [_refreshed(r).state for r in accepted] == [dtq.TaskState.QUEUED] * 2
    assert _stream_len(dtq_env) == 2


@pytest.mark.parametrize("chunk", [500, 2])
def test_bulk_reloads_scripts_after_a_script_flush(dtq_env, monkeypatch, chunk):
    monkeypatch.setattr("dtq.engine.submit.MANY_CHUNK", chunk)
    tasks.record.enqueue_many([((0,), {})])
    dtq_env.client.script_flush()
    results = tasks.record.enqueue_many([((i,), {}) for i in range(5)])
    assert len({r.id for r in results}) == 5
    assert _stream_len(dtq_env) == 6


@pytest.mark.parametrize("chunk", [500, 2])
def test_bulk_resends_after_a_dropped_connection_without_duplicates(dtq_env, monkeypatch, chunk):
    monkeypatch.setattr("dtq.engine.submit.MANY_CHUNK", chunk)
    tasks.record.enqueue_many([((0,), {})])  # this thread now holds its own connection
    # This thread's own link of each shard's pool (on a cluster: one pool per primary).
    pools = {shards.client(shard).connection_pool for shard in shards.numbers()}
    links = [direct._pinned.held[pool][1] for pool in pools if pool in direct._pinned.held]
    assert links  # the first call went over one, at least
    for conn in links:
        host, port = conn._sock.getsockname()[:2]
        server_host, server_port = conn._sock.getpeername()[:2]
        with redis.Redis(server_host, server_port) as server:
            server.client_kill(f"{host}:{port}")
    results = tasks.record.enqueue_many([((i,), {}) for i in range(5)])
    assert len({r.id for r in results}) == 5
    assert _stream_len(dtq_env) == 6


def test_aenqueue_many_from_async_code(dtq_env):
    results = asyncio.run(tasks.record.aenqueue_many([((i,), {}) for i in range(3)]))
    assert [r.state for r in results] == [dtq.TaskState.QUEUED] * 3
    assert _stream_len(dtq_env) == 3


def test_bulk_tasks_run_on_a_worker(dtq_env):
    results = tasks.record.enqueue_many([((i,), {}) for i in range(5)])
    assert dtq_env.worker("--burst").wait(60) == 0
    assert sorted(w["id"] for w in dtq_env.witnessed("record")) == sorted(r.id for r in results)
    assert [_refreshed(r).return_value for r in results] == list(range(5))


def test_options_shared_by_items_are_checked_with_their_types(dtq_env):
    # Checked once per distinct set of options: True == 1, but only 1 is a priority.
    good = tasks.record.using(priority=1).submission((1,), {})
    bad = dataclasses.replace(good, priority=True)
    with pytest.raises(dtq.BulkSubmitError, match="nothing was submitted") as info:
        submit.submit_many([good, bad, good])
    assert sorted(info.value.errors) == [1]
    assert isinstance(info.value.errors[1], InvalidOption)
    assert info.value.errors[1].option == "priority"
    assert _stream_len(dtq_env) == 0


def test_runs_of_one_task_have_their_options_checked_once(dtq_env, monkeypatch):
    # Task.enqueue_many's runs share their option objects (Submission.called): the options are
    # looked at for the first run only, and each run still has its own arguments checked.
    looked = []
    key_of = submit._options_key
    monkeypatch.setattr(submit, "_options_key", lambda sub: looked.append(sub) or key_of(sub))
    results = tasks.record.enqueue_many([((i,), {}) for i in range(50)])
    assert len(results) == 50 and len(looked) == 1
    with pytest.raises(dtq.BulkSubmitError) as info:
        tasks.record.enqueue_many([((1,), {}), ((object(),), {})])
    assert sorted(info.value.errors) == [1]


def _mixed_shapes() -> list[submit.Submission]:
    return [
        tasks.record.submission((0,), {}),
        tasks.record.using(priority=50, run_after=timedelta(seconds=60)).submission((1,), {}),
        tasks.record.using(timeout=5).submission((2,), {}),
        tasks.record.submission((3,), {}),
    ]


def test_each_task_of_a_bulk_call_gets_its_own_shape(dtq_env):
    outcomes = submit.submit_many(_mixed_shapes())
    records = [dtq.TaskResult.load(o.id).record for o in outcomes]
    assert [r["state"] for r in records] == ["QUEUED", "PENDING", "QUEUED", "QUEUED"]
    assert [r["priority"] for r in records] == [0, 50, 0, 0]
    assert [r["band"] for r in records] == [1, 0, 1, 1]
    assert [r["payload"]["args"] for r in records] == [[0], [1], [2], [3]]
    assert [r.get("timeout") for r in records] == [None, None, 5.0, None]
    assert records[1]["run_after"] - records[1]["created_at"] == pytest.approx(60)
    assert _stream_len(dtq_env) == 3
    assert len(dtq_env.events("TASK_SUBMITTED")) == 4


def test_a_bulk_call_writes_one_submitted_event_per_shape_and_each_task_reads_its_own(dtq_env):
    results = tasks.record.enqueue_many([((i,), {}) for i in range(3)])
    delayed = tasks.record.using(run_after=timedelta(seconds=60)).enqueue_many([((9,), {})])
    raw = [
        codec.loads(fields["e"])
        for keys, client in dtq_env.every_shard()
        for _, fields in client.xrange(keys.events)
    ]
    objects = [o for entry in raw for o in (entry if isinstance(entry, list) else [entry])]
    assert sum(len(o.get("tasks", [o.get("task")])) for o in objects) == 4
    assert all("tasks" in o for o in objects)  # grouped, a few bytes a task
    events = {e["task"]: e for e in dtq_env.events("TASK_SUBMITTED")}
    for result, state in [*((r, "QUEUED") for r in results), (delayed[0], "PENDING")]:
        event = events[result.id]
        assert (event["queue"], event["state"], event["attempt"]) == ("tests", state, 0)
        assert event["name"] == tasks.record.name and isinstance(event["ts"], int)


@pytest.mark.parametrize("later", [None, timedelta(seconds=60)], ids=["queued", "pending"])
def test_a_record_copied_from_a_bulk_calls_template_is_the_record_written_whole(dtq_env, later):
    # Eight tasks or more of one shape copy a template record (submit.lua); fewer are written
    # field by field. Same fields, same values, in the same order (the claim reads early ones).
    task = tasks.record.using(priority=50, timeout=5, run_after=later)
    copied = task.enqueue_many([((i,), {}) for i in range(8)])
    whole = task.enqueue_many([((7,), {})])

    def raw(result):
        keys = dtq_env.keys_of(result.id)
        return dtq_env.client_of(keys).hgetall(keys.task(result.id))

    times = {"created_at", "enqueued_at", "run_after"}
    one, other = raw(copied[7]), raw(whole[0])
    assert list(one) == list(other)
    assert {k: v for k, v in one.items() if k not in times | {"id", "delivery"}} == {
        k: v for k, v in other.items() if k not in times | {"id", "delivery"}
    }
    assert (one["id"], bool(one["delivery"])) == (copied[7].id, later is None)
    assert one["payload"] == '{"args":[7],"kwargs":{}}'
    assert not any(
        client.keys(keys.template) for keys, client in dtq_env.every_shard()
    )  # deleted by the call that made it


def _answers(reply, as_sent):
    """Return a submit.lua reply as (kind, id, state, created) per task, 'all' spelt out."""
    answers = gateway.submitted(reply)
    if isinstance(answers, gateway.AllAccepted):
        return [("ok", task_id, state, answers.created) for task_id, state in as_sent]
    return [tuple(answer) for answer in answers]


def _on_one_shard(n):
    """Return n submissions whose tasks live in shard 0 (one script call for them all)."""
    subs = [tasks.record.submission((i,), {}) for i in range(n)]
    for sub in subs:
        sub.task_id = ids.new_id(0)
    return subs


def test_a_first_call_answers_all_and_any_other_answer_spells_out_each_task(dtq_env):
    """'all' and the time when each task is accepted as sent; else one answer per task."""
    units = submit._units(_on_one_shard(3), {})  # one unit: one call
    calls = submit._Calls(units)
    key_list, argv = calls[0]
    script = Scripts.of(routed(get_client(), key_list)).submit
    reply = script(keys=key_list, args=argv)
    assert reply[0] == "all" and len(reply) == 2
    dtq_env.configure(QUEUE_MAX_DEPTH={"tests": 5})  # the third of these is one too many
    units = submit._units(_on_one_shard(3), {})
    calls = submit._Calls(units)
    key_list, argv = calls[0]
    answers = _answers(script(keys=key_list, args=argv), calls.as_sent[0])
    assert [(kind, task_id) for kind, task_id, _, _ in answers] == [
        ("ok", calls.as_sent[0][0][0]),
        ("ok", calls.as_sent[0][1][0]),
        ("full", "5"),
    ]
    assert [state for _, _, state, _ in answers[:2]] == ["QUEUED", "QUEUED"]


def test_a_resent_bulk_call_answers_as_the_first_and_writes_nothing(dtq_env):
    outcomes = {}
    units = submit._units(_mixed_shapes(), {})  # one per shard
    calls = submit._Calls(units)
    for i, unit in enumerate(units):
        key_list, argv = calls[i]
        script = Scripts.of(routed(get_client(), key_list)).submit
        first = _answers(script(keys=key_list, args=argv), calls.as_sent[i])
        assert _answers(script(keys=key_list, args=argv), calls.as_sent[i]) == first
        outcomes.update({p: (first[j][0], first[j][2]) for j, p in enumerate(unit.positions)})
    assert [outcomes[p] for p in sorted(outcomes)] == [
        ("ok", "QUEUED"),
        ("ok", "PENDING"),
        ("ok", "QUEUED"),
        ("ok", "QUEUED"),
    ]
    assert _stream_len(dtq_env) == 3
    assert len(dtq_env.events("TASK_SUBMITTED")) == 4
    assert (dtq_env.stats()["submitted"], dtq_env.stats()["active"]) == (4, 4)
