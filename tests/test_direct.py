"""Direct script calls (dtq.engine.direct) and the worker's blocking group read."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from redis.exceptions import ResponseError

import dtq
from dtq.engine import ops
from dtq.engine.connection import get_client, new_async_client
from dtq.engine.direct import AsyncCaller, _own_connection, call_script
from tests.conftest import wait_for
from tests.ops_support import ACTOR
from tests.script_calls import raw_script
from tests.testapp import tasks

SCRIPT = "redis.call('INCR', KEYS[1]) return {ARGV[1], redis.call('GET', KEYS[1])}"


def test_sync_call_reloads_a_flushed_script(dtq_env):
    client = get_client()
    script = raw_script(SCRIPT)
    key = f"{dtq_env.prefix}:direct"
    assert call_script(client, script, [key], ["a"]) == ["a", "1"]
    dtq_env.client.script_flush()
    assert call_script(client, script, [key], ["b"]) == ["b", "2"]


def test_sync_call_resends_after_a_dropped_connection(dtq_env):
    client = get_client()
    script = raw_script(SCRIPT)
    key = f"{dtq_env.prefix}:direct"
    call_script(client, script, [key], ["a"])
    conn = _own_connection(client.connection_pool)  # the one call_script used, and will use
    conn.send_command("CLIENT", "ID")
    dtq_env.client.client_kill_filter(_id=conn.read_response())
    assert call_script(client, script, [key], ["b"]) == ["b", "2"]


def test_each_thread_and_each_new_pool_get_their_own_connection(dtq_env):
    import threading

    from dtq.engine import connection

    client = get_client()
    mine = _own_connection(client.connection_pool)
    assert _own_connection(client.connection_pool) is mine
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(_own_connection(client.connection_pool)))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
    connection.reset()  # settings reloaded: a new client and pool
    assert _own_connection(get_client().connection_pool) is not mine


def test_submit_goes_through_a_direct_call_and_survives_a_flush(dtq_env):
    dtq_env.client.script_flush()
    result = tasks.record.enqueue(1)
    assert result.state == dtq.TaskState.QUEUED


def test_async_caller_reloads_resends_and_owns_one_connection(dtq_env):
    key = f"{dtq_env.prefix}:direct"

    async def run() -> list:
        client = new_async_client()
        script = raw_script(SCRIPT)
        caller = AsyncCaller(client)
        replies = [await caller.script(script, [key], ["a"])]
        conn = await caller.connection()
        dtq_env.client.script_flush()
        replies.append(await caller.script(script, [key], ["b"]))
        await conn.send_command("CLIENT", "ID")
        dtq_env.client.client_kill_filter(_id=await conn.read_response())
        replies.append(await caller.script(script, [key], ["c"]))
        assert await caller.connection() is conn  # reconnected in place
        await caller.aclose()
        await client.aclose()
        return replies

    assert asyncio.run(run()) == [["a", "1"], ["b", "2"], ["c", "3"]]


def test_async_caller_raises_an_error_reply_and_keeps_the_connection(dtq_env):
    key = f"{dtq_env.prefix}:direct"

    async def run() -> list:
        client = new_async_client()
        caller = AsyncCaller(client)
        conn = await caller.connection()
        with pytest.raises(ResponseError, match="refused here"):
            await caller.script(raw_script("return redis.error_reply('refused here')"), [key], [])
        reply = await caller.script(raw_script(SCRIPT), [key], ["a"])
        assert await caller.connection() is conn and conn.is_connected
        await caller.aclose()
        await client.aclose()
        return reply

    assert asyncio.run(run()) == ["a", "1"]


def test_idle_worker_runs_a_new_task_and_stops_at_once(dtq_env):
    dtq_env.configure(BLOCK_TIMEOUT=8.0)
    worker = dtq_env.worker()
    time.sleep(1.5)  # idle: blocked in its group read
    result = tasks.record.enqueue(7)
    wait_for(lambda: result.refresh() or result.is_finished)
    assert result.state == dtq.TaskState.SUCCEEDED
    time.sleep(0.3)
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    # CLIENT UNBLOCK ends the block: no waiting out BLOCK_TIMEOUT, nothing left pending.
    assert time.monotonic() - started < 5.0
    assert dtq_env.leftovers()["pending"] == 0


@pytest.mark.django_db(transaction=True)  # the audit rows are committed outside the test's
def test_entry_read_by_a_blocked_worker_after_a_pause_waits_for_resume(dtq_env):
    dtq_env.configure(BLOCK_TIMEOUT=8.0)
    worker = dtq_env.worker()
    time.sleep(1.5)  # idle: blocked in its group read, which began before the pause
    ops.pause_queue("tests", actor=ACTOR)
    result = tasks.record.enqueue(1)
    time.sleep(1.0)
    result.refresh()
    assert result.state == dtq.TaskState.QUEUED
    assert dtq_env.witnessed("record") == []
    assert dtq_env.leftovers()["pending"] == 0  # given back, not held under the worker
    ops.resume_queue("tests", actor=ACTOR)
    wait_for(lambda: result.refresh() or result.is_finished)
    assert result.state == dtq.TaskState.SUCCEEDED
    assert result.attempt == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
