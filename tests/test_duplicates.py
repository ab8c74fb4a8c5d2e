"""Stale and duplicate stream entries, written by hand, are absorbed and never executed."""

from __future__ import annotations

from typing import Any

import pytest

import dtq
from dtq.engine import ids, layout
from tests.conftest import Env, wait_for
from tests.script_calls import Scripts
from tests.testapp import tasks

pytestmark = pytest.mark.slow

SETTLED = {"pending": 0, "running": 0, "schedule": 0}
NORMAL_BAND, HIGH_BAND = 1, 0


def finished(result: dtq.TaskResult) -> Any:
    """Return a condition that holds once the task is terminal."""

    def check() -> bool:
        result.refresh()
        return result.is_finished

    return check


def inject(env: Env, fields: dict[str, Any], band: int = NORMAL_BAND) -> str:
    """XADD an entry to the tests queue by hand, as a crash or a bug could leave it.

    It goes to the shard of the task it names (HOME when it names none).
    """
    keys = env.keys_of(fields["t"]) if ids.is_valid(fields.get("t")) else env.keys
    return str(env.client_of(keys).xadd(keys.stream("tests", band), fields))


def stream_len(env: Env, band: int) -> int:
    """Return how many entries the tests queue's band holds, in every shard."""
    return env.total(lambda client, keys: client.xlen(keys.stream("tests", band)))


def absorbed_states(env: Env) -> dict[str, str]:
    """Return entry id -> task state seen by the claim, for every absorbed entry."""
    return {e["entry"]: e["state"] for e in env.events("TASK_DUPLICATE_ABSORBED")}


def test_stale_entry_of_a_queued_task_is_absorbed(dtq_env: Env) -> None:
    result = tasks.record.enqueue("once")
    # Band 0 is read first, so the claim meets the stale entry while the task is still QUEUED
    # and its current delivery is the other entry.
    stale = inject(dtq_env, {"t": result.id, "a": 1}, band=HIGH_BAND)
    dtq_env.worker()
    wait_for(finished(result))

    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert len(dtq_env.witnessed("record")) == 1
    assert absorbed_states(dtq_env) == {stale: "QUEUED"}
    assert dtq_env.stats()["absorbed"] == 1
    assert stream_len(dtq_env, HIGH_BAND) == 0
    assert dtq_env.leftovers() == SETTLED


def test_stale_entry_with_the_same_id_in_another_band_is_absorbed(dtq_env: Env) -> None:
    # Entry ids are unique per stream only: an entry of another band can carry the very id
    # of the task's delivery (two XADDs in one millisecond). It must still be absorbed.
    result = tasks.record.enqueue("once")
    keys = dtq_env.keys_of(result.id)
    client = dtq_env.client_of(keys)
    delivery = client.hget(keys.task(result.id), "delivery")
    stale = str(client.xadd(keys.stream("tests", HIGH_BAND), {"t": result.id, "a": 1}, id=delivery))
    assert stale == delivery
    dtq_env.worker()
    wait_for(finished(result))

    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert len(dtq_env.witnessed("record")) == 1
    assert dtq_env.stats()["absorbed"] == 1
    assert dtq_env.leftovers() == SETTLED


def test_duplicate_of_a_running_task_is_absorbed(dtq_env: Env) -> None:
    dtq_env.worker()
    result = tasks.hold.enqueue(0.8)
    wait_for(lambda: dtq_env.witnessed("hold"))
    duplicate = inject(dtq_env, {"t": result.id, "a": 1})
    wait_for(lambda: absorbed_states(dtq_env))
    wait_for(finished(result))

    assert absorbed_states(dtq_env) == {duplicate: "RUNNING"}
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert [row["phase"] for row in dtq_env.witnessed("hold")] == ["start", "end"]
    assert dtq_env.stats()["absorbed"] == 1
    assert dtq_env.leftovers() == SETTLED


def test_entries_of_finished_and_unknown_tasks_are_absorbed(dtq_env: Env) -> None:
    dtq_env.worker()
    result = tasks.record.enqueue("done")
    wait_for(finished(result))
    before = dict(result.record)

    # (entry, state) pairs, not a dict: entry ids are unique per stream only, and with
    # SHARDS > 1 these go to the streams of two shards, where they can be equal.
    expected = [
        (inject(dtq_env, {"t": result.id, "a": 1}), "SUCCEEDED"),  # the attempt that ran
        (inject(dtq_env, {"t": result.id, "a": 2}), "SUCCEEDED"),  # an attempt that never was
        (inject(dtq_env, {"t": ids.new_id(), "a": 1}), "GONE"),  # no such record
        (inject(dtq_env, {"junk": "1"}), "GONE"),  # no task id at all
    ]
    wait_for(lambda: dtq_env.stats().get("absorbed") == len(expected))

    absorbed = [(e["entry"], e["state"]) for e in dtq_env.events("TASK_DUPLICATE_ABSORBED")]
    assert sorted(absorbed) == sorted(expected)
    assert len(dtq_env.witnessed("record")) == 1
    result.refresh()
    assert result.record == before
    assert stream_len(dtq_env, NORMAL_BAND) == 0
    assert dtq_env.leftovers() == SETTLED


def test_reaper_absorbs_a_stale_entry_left_by_a_dead_consumer(dtq_env: Env) -> None:
    result = tasks.record.enqueue("x")
    stale = inject(dtq_env, {"t": result.id, "a": 1}, band=HIGH_BAND)
    # A worker's blocking read brought both entries and it died before claiming either (a
    # worker's batch read claims in the same call): read as its consumer, its heartbeat old.
    for keys, client in dtq_env.every_shard():
        k, argv = layout.build(keys, ["tests"], layout=layout.of("read"))
        Scripts.of(client).read(keys=k, args=[*argv, "doomed", 10])
    dtq_env.client.zadd(dtq_env.keys.workers, {"doomed": 0})

    dtq_env.spawn("dtq_reaper")
    dtq_env.worker()
    wait_for(finished(result))

    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 1)
    assert len(dtq_env.witnessed("record")) == 1
    assert absorbed_states(dtq_env) == {stale: "QUEUED"}
    assert [e["task"] for e in dtq_env.events("TASK_REDELIVERED")] == [result.id]
    assert dtq_env.leftovers() == SETTLED
