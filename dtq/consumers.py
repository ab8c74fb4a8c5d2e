"""Live lifecycle events over a websocket, for the admin pages (Channels)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from redis.exceptions import RedisError

from dtq.engine.events import Batch, EventFeed
from dtq.models import PERM_VIEW

log = logging.getLogger(__name__)
CLOSE_UNAVAILABLE = 1011  # the browser reconnects with backoff and resumes from its last id


@database_sync_to_async
def may_view(user: Any) -> bool:
    """Return True when the user may watch the queues."""
    return bool(user is not None and user.is_active and user.has_perm(PERM_VIEW))


def message(batch: Batch) -> dict[str, Any]:
    """Return the JSON message that carries a batch to the browser."""
    return {"type": "events", "events": batch.events, "last_id": batch.last_id, "gap": batch.gap}


class EventConsumer(AsyncJsonWebsocketConsumer):
    """Send lifecycle events to a signed-in user with the view permission.

    The client passes `?last_id=<stream id>` (the id the page was rendered at, or the last one
    it received) and gets what it missed first; `gap` tells it to reload instead.
    """

    feed: EventFeed | None = None
    pump: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        if not await may_view(self.scope.get("user")):
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        self.feed = EventFeed()
        try:
            first = await self.feed.open(self._last_id())
        except RedisError as exc:
            log.warning("event feed unavailable error=%s", exc)
            await self.close()
            return
        await self.accept()
        await self.send_json(message(first))
        self.pump = asyncio.create_task(self._forward())

    def _last_id(self) -> str | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        return (query.get("last_id") or [None])[0]

    async def _forward(self) -> None:
        assert self.feed is not None
        try:
            while True:
                batch = await self.feed.next()
                if batch.events:
                    await self.send_json(message(batch))
        except RedisError as exc:
            log.warning("event feed lost error=%s", exc)
            await self.close(code=CLOSE_UNAVAILABLE)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Ignore client messages: the feed is one-way."""

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
            self.pump = None
        if self.feed is not None:
            await self.feed.close()
            self.feed = None
