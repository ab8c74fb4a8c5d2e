"""Live lifecycle events over a websocket, for the admin pages (Channels)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

try:
    from channels.db import database_sync_to_async
    from channels.generic.websocket import AsyncJsonWebsocketConsumer
except ImportError as exc:
    from dtq.extras import missing_extra

    raise missing_extra("live", exc) from exc
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest
from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine.connection import describe
from dtq.engine.events import Batch, EventFeed
from dtq.models import PERM_VIEW

log = logging.getLogger(__name__)
CLOSE_UNAVAILABLE = 1011  # the browser reconnects with backoff and resumes from its last id
CLOSE_REVOKED = 4403  # access ended; the reconnect is refused at the handshake until it is back
CLOSE_TOO_MANY = 4429  # over LIVE_MAX_SOCKETS_PER_USER in this process

# The sockets open in this process, so a logout can end its own at once and the per-user cap
# can count; the signal arrives in a request thread, the sockets live in the event loop.
_open: set[EventConsumer] = set()
_open_lock = threading.Lock()


def admits(user: Any) -> bool:
    """Return True when the user may watch the queues: active staff with the view permission."""
    return bool(user is not None and user.is_active and user.is_staff and user.has_perm(PERM_VIEW))


@database_sync_to_async
def may_view(user: Any) -> bool:
    """Return True when the user of a new connection may watch the queues."""
    return admits(user)


@database_sync_to_async
def still_admitted(session_key: str | None, user_id: Any) -> bool:
    """Return True while the session still signs in the same admitted user (re-read now)."""
    if session_key is None:
        return False
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = auth.get_user(request)  # a deleted session or a changed password: AnonymousUser
    return user.pk == user_id and admits(user)


def message(batch: Batch) -> dict[str, Any]:
    """Return the JSON message that carries a batch to the browser."""
    return {"type": "events", "events": batch.events, "last_id": batch.last_id, "gap": batch.gap}


class EventConsumer(AsyncJsonWebsocketConsumer):
    """Send lifecycle events to a signed-in staff user with the view permission.

    The client passes `?last_id=<stream id>` (the id the page was rendered at, or the last one
    it received) and gets what it missed first; `gap` tells it to reload instead. Access is
    checked again every LIVE_RECHECK_INTERVAL seconds and at once when the session logs out.
    """

    feed: EventFeed | None = None
    pump: asyncio.Task[None] | None = None
    user_id: Any = None
    session_key: str | None = None
    loop: asyncio.AbstractEventLoop | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not await may_view(user):
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        self.user_id = user.pk  # type: ignore[union-attr]
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        if not self._register():
            log.warning("live socket refused user_id=%s reason=too_many", self.user_id)
            await self.close(code=CLOSE_TOO_MANY)
            return
        # The feed returns at least every `poll` seconds: that paces the access re-checks.
        self.feed = EventFeed(poll=min(5.0, dtq_settings.LIVE_RECHECK_INTERVAL))
        try:
            first = await self.feed.open(self._last_id())
        except RedisError as exc:
            log.warning("event feed unavailable error=%s", describe(exc))
            await self._end_feed()
            await self.close()
            return
        await self.accept()
        await self.send_json(message(first))
        self.pump = asyncio.create_task(self._forward())

    def _register(self) -> bool:
        """Count this socket in; False when its user already has the most allowed."""
        cap = dtq_settings.LIVE_MAX_SOCKETS_PER_USER
        self.loop = asyncio.get_running_loop()
        with _open_lock:
            if sum(1 for c in _open if c.user_id == self.user_id) >= cap:
                return False
            _open.add(self)
        return True

    def _last_id(self) -> str | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        return (query.get("last_id") or [None])[0]

    async def _forward(self) -> None:
        assert self.feed is not None
        interval = dtq_settings.LIVE_RECHECK_INTERVAL
        checked = time.monotonic()
        try:
            while True:
                if time.monotonic() - checked >= interval:
                    if not await still_admitted(self.session_key, self.user_id):
                        log.info("live socket closed user_id=%s reason=revoked", self.user_id)
                        await self.close(code=CLOSE_REVOKED)
                        return
                    checked = time.monotonic()
                batch = await self.feed.next()
                if batch.events:
                    await self.send_json(message(batch))
        except RedisError as exc:
            log.warning("event feed lost error=%s", describe(exc))
            await self.close(code=CLOSE_UNAVAILABLE)

    def revoke(self) -> None:
        """End this socket from any thread (its session logged out)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._revoked()))

    async def _revoked(self) -> None:
        log.info("live socket closed user_id=%s reason=logout", self.user_id)
        await self.close(code=CLOSE_REVOKED)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Ignore client frames unread: the feed is one-way (and junk must not end it)."""

    async def disconnect(self, code: int) -> None:
        with _open_lock:
            _open.discard(self)
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
            self.pump = None
        await self._end_feed()

    async def _end_feed(self) -> None:
        if self.feed is not None:
            feed, self.feed = self.feed, None
            await feed.close()


@receiver(user_logged_out)
def _end_sockets_of_session(request: Any = None, **kwargs: Any) -> None:
    """Close this process's sockets of a session that just logged out."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key is None:
        return
    with _open_lock:
        ending = [c for c in _open if c.session_key == key]
    for consumer in ending:
        consumer.revoke()
