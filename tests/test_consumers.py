"""The live event websocket (dtq.consumers) and its feed (dtq.engine.events), on a real Redis."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission, User
from django.test import Client

from dtq.engine import events
from dtq.engine.events import EventFeed
from dtq_project.asgi import application
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand
from tests.testapp import tasks

# The consumer loads the session and user in worker threads: they must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")
TIMEOUT = 5


def session_cookie(*, view: bool = True, staff: bool = True) -> bytes:
    """Return a Cookie header for a signed-in user with (or without) the view permission."""
    user = User.objects.create(username=f"u{User.objects.count()}", is_staff=staff)
    if view:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="dtq", codename="view_queues")
        )
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(cookie: bytes | None, query: str = "", origin=ORIGIN) -> WebsocketCommunicator:
    headers = [origin] if origin else []
    if cookie:
        headers.append((b"cookie", cookie))
    path = "/" + "ws/dtq/events/" + (f"?{query}" if query else "")
    return WebsocketCommunicator(application, path, headers=headers)


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return async_to_sync(scenario)()


async def connected(comm: WebsocketCommunicator) -> dict[str, Any]:
    """Connect, assert the handshake was accepted, and return the first message."""
    ok, _ = await comm.connect(timeout=TIMEOUT)
    assert ok
    return await comm.receive_json_from(timeout=TIMEOUT)


async def events_until(comm: WebsocketCommunicator, count: int) -> list[dict[str, Any]]:
    """Receive messages until count events arrived; return the events."""
    got: list[dict[str, Any]] = []
    while len(got) < count:
        message = await comm.receive_json_from(timeout=TIMEOUT)
        assert message["type"] == "events"
        got += message["events"]
    return got


enqueue = sync_to_async(lambda *a: tasks.record.enqueue(*a).id)


def refused(cookie: bytes | None, **kwargs: Any) -> bool:
    async def scenario() -> bool:
        comm = communicator(cookie, **kwargs)
        ok, _ = await comm.connect(timeout=TIMEOUT)
        await comm.disconnect()
        return not ok

    return run(scenario)


def test_anonymous_users_are_refused(dtq_env):
    assert refused(None)


def test_users_without_the_view_permission_are_refused(dtq_env):
    assert refused(session_cookie(view=False))


def test_inactive_users_are_refused(dtq_env):
    cookie = session_cookie()
    User.objects.update(is_active=False)
    assert refused(cookie)


def test_a_foreign_origin_is_refused(dtq_env):
    cookie = session_cookie()
    assert refused(cookie, origin=(b"origin", b"http://evil.example"))
    assert refused(cookie, origin=None)
    assert not refused(cookie)


def test_events_arrive_live_with_their_stream_ids(dtq_env):
    cookie = session_cookie()

    async def scenario() -> None:
        comm = communicator(cookie)
        first = await connected(comm)
        assert first == {"type": "events", "events": [], "last_id": events.ORIGIN, "gap": False}
        task_id = await enqueue(1)
        [event] = await events_until(comm, 1)
        assert (event["type"], event["task"], event["queue"]) == (
            "TASK_SUBMITTED",
            task_id,
            "tests",
        )
        assert event["id"] == await sync_to_async(events.latest_id)()
        await comm.disconnect()

    run(scenario)


def blocked_on_events(client: Any) -> int:
    """Return how many clients are blocked in a read (the feed's XREAD on the event stream)."""
    return int(client.info("clients")["blocked_clients"])


def test_the_feed_read_ends_with_the_connection(dtq_env):
    cookie = session_cookie()
    before = blocked_on_events(dtq_env.client)

    async def scenario() -> None:
        comm = communicator(cookie)
        await connected(comm)
        await sync_to_async(wait_for)(
            lambda: blocked_on_events(dtq_env.client) == before + 1, timeout=5
        )
        await comm.disconnect()

    run(scenario)
    # The server notices the closed connection a moment later.
    wait_for(lambda: blocked_on_events(dtq_env.client) == before, timeout=5)


def test_one_script_call_writes_its_events_in_one_entry(dtq_env):
    """A claim of several tasks is one event entry; the feed gives back each event."""
    ids = [tasks.record.enqueue(i).id for i in range(3)]
    seen = events.latest_id()
    length = dtq_env.client.xlen(dtq_env.keys.events)
    claimed = claim_by_hand("tests", 3)
    assert sorted(c["id"] for c in claimed) == sorted(ids)
    assert dtq_env.client.xlen(dtq_env.keys.events) == length + 1

    async def scenario() -> list[dict[str, Any]]:
        feed = EventFeed(poll=0.1)
        try:
            return (await feed.open(seen)).events
        finally:
            await feed.close()

    got = run(scenario)
    assert [(e["type"], e["task"]) for e in got] == [("TASK_STARTED", i) for i in ids]
    assert {e["id"] for e in got} == {events.latest_id()}
    assert [(e["type"], e["task"]) for e in events.recent(count=3)] == [
        ("TASK_STARTED", i) for i in ids
    ]


def test_a_client_catches_up_from_its_last_id(dtq_env):
    cookie = session_cookie()
    tasks.record.enqueue()
    seen = events.latest_id()
    missed = [tasks.record.enqueue(i).id for i in range(3)]

    async def scenario() -> None:
        comm = communicator(cookie, f"last_id={seen}")
        first = await connected(comm)
        assert [e["task"] for e in first["events"]] == missed
        assert first["gap"] is False
        assert first["last_id"] == first["events"][-1]["id"] == events.latest_id()
        later = await enqueue()
        [event] = await events_until(comm, 1)
        assert event["task"] == later
        await comm.disconnect()

    run(scenario)


def test_a_trimmed_stream_is_reported_as_a_gap(dtq_env):
    cookie = session_cookie()
    tasks.record.enqueue()
    seen = events.latest_id()
    for _ in range(3):
        tasks.record.enqueue()
    dtq_env.client.xtrim(dtq_env.keys.events, maxlen=1, approximate=False)

    async def scenario() -> dict[str, Any]:
        comm = communicator(cookie, f"last_id={seen}")
        first = await connected(comm)
        await comm.disconnect()
        return first

    first = run(scenario)
    assert first["gap"] is True and first["events"] == []
    assert first["last_id"] == events.latest_id()


def test_too_many_missed_events_are_reported_as_a_gap(dtq_env, monkeypatch):
    monkeypatch.setattr(events, "CATCH_UP_LIMIT", 2)
    cookie = session_cookie()
    tasks.record.enqueue()
    seen = events.latest_id()
    for _ in range(3):
        tasks.record.enqueue()

    async def scenario() -> dict[str, Any]:
        comm = communicator(cookie, f"last_id={seen}")
        first = await connected(comm)
        await comm.disconnect()
        return first

    first = run(scenario)
    assert first["gap"] is True and first["last_id"] == events.latest_id()


def test_a_malformed_last_id_starts_from_now(dtq_env):
    cookie = session_cookie()
    tasks.record.enqueue()

    async def scenario() -> dict[str, Any]:
        comm = communicator(cookie, "last_id=../../etc")
        first = await connected(comm)
        await comm.disconnect()
        return first

    assert run(scenario) == {
        "type": "events",
        "events": [],
        "last_id": events.latest_id(),
        "gap": False,
    }


def test_the_feed_reads_the_stream_even_when_a_publish_was_missed(dtq_env):
    """An event written while the subscription was down still arrives (the poll reads it)."""

    async def scenario() -> list[dict[str, Any]]:
        feed = EventFeed(poll=0.1)
        await feed.open(None)
        try:
            payload = json.dumps(
                {"type": "TASK_X", "task": "t", "queue": "q", "state": "", "ts": 1}
            )
            await sync_to_async(dtq_env.client.xadd)(dtq_env.keys.events, {"e": payload})
            batch = await asyncio.wait_for(feed.next(), TIMEOUT)
            return batch.events
        finally:
            await feed.close()

    [event] = run(scenario)
    assert event["type"] == "TASK_X" and event["id"] == events.latest_id()


def test_the_feed_reads_a_burst_in_batches_without_waiting(dtq_env, monkeypatch):
    monkeypatch.setattr(events, "READ_BATCH", 2)

    async def scenario() -> tuple[list[str], list[list[str]]]:
        feed = EventFeed(poll=30)  # waiting for another publish would time the test out
        await feed.open(None)
        ids = [await enqueue() for _ in range(5)]
        batches: list[list[str]] = []
        try:
            while sum(map(len, batches)) < 5:
                batch = await asyncio.wait_for(feed.next(), TIMEOUT)
                batches.append([e["task"] for e in batch.events])
        finally:
            await feed.close()
        return ids, batches

    ids, batches = run(scenario)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [task for batch in batches for task in batch] == ids


def test_the_socket_closes_when_redis_goes_away(dtq_env, private_redis):
    cookie = session_cookie()
    dtq_env.configure(SOCKET_TIMEOUT=1.0, SOCKET_CONNECT_TIMEOUT=0.2, BLOCK_TIMEOUT=0.5)

    async def scenario() -> dict[str, Any]:
        comm = communicator(cookie)
        await connected(comm)
        await sync_to_async(private_redis.stop)(signal.SIGKILL)
        closed = await comm.receive_output(timeout=30)
        await comm.disconnect()
        return closed

    closed = run(scenario)
    assert (closed["type"], closed["code"]) == ("websocket.close", 1011)
