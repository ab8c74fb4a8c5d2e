"""The live event websocket (dtq.consumers) and its feed (dtq.engine.events), on a real Redis."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

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


# ----- access for the whole life of a socket (#13 item 11) ------------------------------------


def test_staff_only_like_the_admin_pages(dtq_env):
    assert refused(session_cookie(staff=False))


def session_key(cookie: bytes) -> str:
    return cookie.decode().split("=", 1)[1]


async def closed_code(comm: WebsocketCommunicator, timeout: float = TIMEOUT) -> int:
    """Wait for the server to close the socket (events may come first); return its code."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        output = await comm.receive_output(timeout=deadline - asyncio.get_running_loop().time())
        if output["type"] == "websocket.close":
            return output["code"]


def revoke_permission() -> None:
    Permission.objects.get(codename="view_queues").user_set.clear()


def change_password() -> None:
    for user in User.objects.all():
        user.set_password("a-new-password")
        user.save()


def delete_session(key: str) -> None:
    from django.contrib.sessions.models import Session

    Session.objects.filter(session_key=key).delete()


@pytest.mark.parametrize(
    "revoke",
    [
        lambda key: revoke_permission(),
        lambda key: User.objects.update(is_active=False),
        lambda key: User.objects.update(is_staff=False),
        delete_session,
        lambda key: change_password(),
    ],
    ids=["permission-removed", "deactivated", "no-longer-staff", "session-deleted", "password"],
)
def test_a_socket_closes_once_access_ends(dtq_env, revoke):
    dtq_env.configure(LIVE_RECHECK_INTERVAL=0.2)
    cookie = session_cookie()

    async def scenario() -> int:
        comm = communicator(cookie)
        await connected(comm)
        await enqueue(1)
        await events_until(comm, 1)  # still streaming
        await sync_to_async(revoke)(session_key(cookie))
        code = await closed_code(comm)
        await comm.disconnect()
        return code

    assert run(scenario) == 4403
    assert refused(cookie)  # and the reconnect is refused


def test_logout_closes_the_sessions_sockets_at_once(dtq_env):
    dtq_env.configure(LIVE_RECHECK_INTERVAL=3600)  # only the logout can close it in time
    cookie, other = session_cookie(), session_cookie()

    def logout(key: str) -> None:
        from importlib import import_module

        from django.conf import settings
        from django.contrib.auth import logout
        from django.test import RequestFactory

        request = RequestFactory().get("/admin/logout/")
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
        request.user = User.objects.get(pk=request.session["_auth_user_id"])
        logout(request)

    async def scenario() -> tuple[int, bool]:
        mine, theirs = communicator(cookie), communicator(other)
        await connected(mine)
        await connected(theirs)
        await sync_to_async(logout)(session_key(cookie))
        code = await closed_code(mine, timeout=2)
        still_open = await theirs.receive_nothing(timeout=0.3)
        await mine.disconnect()
        await theirs.disconnect()
        return code, still_open

    assert run(scenario) == (4403, True)


def test_sockets_per_user_are_capped(dtq_env):
    dtq_env.configure(LIVE_MAX_SOCKETS_PER_USER=3)
    cookie, other = session_cookie(), session_cookie()

    async def scenario() -> tuple[bool, int]:
        comms = [communicator(cookie) for _ in range(3)]
        for comm in comms:
            await connected(comm)
        extra = communicator(cookie)
        ok, code = await extra.connect(timeout=TIMEOUT)
        someone_else = communicator(other)
        await connected(someone_else)  # the cap is per user
        await comms.pop().disconnect()
        again = communicator(cookie)
        await connected(again)  # a closed socket frees its place
        for comm in [*comms, extra, someone_else, again]:
            await comm.disconnect()
        return ok, code

    assert run(scenario) == (False, 4429)


def redis_connections_of_this_process(client) -> int:
    """Count CLIENT LIST entries whose address is one of this process's local sockets."""
    import psutil

    mine = {
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.status == psutil.CONN_ESTABLISHED
    }
    return sum(1 for entry in client.client_list() if entry["addr"] in mine)


def test_closed_sockets_leave_no_redis_connection_open(dtq_env):
    dtq_env.configure(LIVE_MAX_SOCKETS_PER_USER=50)
    cookie = session_cookie()
    dtq_env.client.ping()  # its own connection is open before the first count
    before = redis_connections_of_this_process(dtq_env.client)

    async def scenario() -> int:
        comms = [communicator(cookie) for _ in range(40)]
        for comm in comms:
            await connected(comm)
        during = await sync_to_async(redis_connections_of_this_process)(dtq_env.client)
        for comm in comms:
            await comm.disconnect()
        return during

    assert run(scenario) >= before + 40
    wait_for(lambda: redis_connections_of_this_process(dtq_env.client) <= before, timeout=5)


# ----- bad input (found by tests/test_fuzz.py) --------------------------------------------------


@pytest.mark.parametrize(
    "last_id", ["18446744073709551616-0", "1-18446744073709551616", "\u0661-\u0661", "1-1\n"]
)
def test_a_last_id_redis_would_refuse_starts_from_now(dtq_env, last_id):
    cookie = session_cookie()

    async def scenario() -> dict[str, Any]:
        comm = communicator(cookie, urlencode({"last_id": last_id}))
        first = await connected(comm)
        await comm.disconnect()
        return first

    assert run(scenario)["last_id"] == events.latest_id()


def test_junk_frames_are_ignored_and_the_feed_goes_on(dtq_env):
    cookie = session_cookie()

    async def scenario() -> str:
        comm = communicator(cookie)
        await connected(comm)
        await comm.send_to(text_data="{not json")
        await comm.send_to(bytes_data=b"\xff\x00")
        task_id = await enqueue(1)
        [event] = await events_until(comm, 1)
        await comm.disconnect()
        return event["task"] == task_id

    assert run(scenario)
