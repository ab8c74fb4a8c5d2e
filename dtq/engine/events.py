"""Lifecycle events for live views: catch up from the capped event stream, then follow it.

The Lua scripts write every event once, into the capped stream ``Keys.events`` (field ``e``:
one event as a JSON object, or the events of one script call as a JSON array). A feed blocks
in XREAD on the stream after the last id it delivered, so every event arrives once, in stream
order, with the stream id a client resumes from, and writing an event costs one XADD (no
PUBLISH: a script call writes its events in one entry, and a feed wakes on it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec
from dtq.engine.connection import get_client, new_async_client
from dtq.engine.keys import Keys

STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # ASCII digits only: \d takes any Unicode digit
MAX_ID_PART = 2**64 - 1  # Redis refuses a stream id past 64 bits
ORIGIN = "0-0"
CATCH_UP_LIMIT = 1000  # more missed events than this: tell the client to reload instead
READ_BATCH = 500


@dataclass(slots=True)
class Batch:
    """Events read in one go; `gap` means some were lost and the client should reload."""

    events: list[dict[str, Any]] = field(default_factory=list)
    last_id: str = ORIGIN
    gap: bool = False


def _keys(prefix: str | None) -> Keys:
    # The event stream lives in shard 0, like every process-wide key (SHARDS must be 1).
    return Keys(prefix or dtq_settings.KEY_PREFIX, 0)


def valid_id(value: object) -> bool:
    """Return True when value is a stream id Redis accepts ('<ms>-<seq>', 64 bits each)."""
    if not isinstance(value, str) or not STREAM_ID.fullmatch(value):
        return False
    return max(_order(value)) <= MAX_ID_PART


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


def decode(entries: list[Any]) -> list[dict[str, Any]]:
    """Return the events of XRANGE-style entries, each with its entry's stream id."""
    events = []
    for stream_id, fields in entries:
        try:
            found = codec.loads(fields.get("e", ""))
        except ValueError:
            continue  # a damaged entry must not stop the feed
        # The events of one script call share its entry, and so its stream id.
        for event in found if isinstance(found, list) else [found]:
            if isinstance(event, dict):
                event["id"] = stream_id
                events.append(event)
    return events


def latest_id(prefix: str | None = None) -> str:
    """Return the id of the newest event (the origin when there is none yet)."""
    newest = get_client().xrevrange(_keys(prefix).events, count=1)
    return str(newest[0][0]) if newest else ORIGIN


def recent(prefix: str | None = None, count: int = 50) -> list[dict[str, Any]]:
    """Return up to count newest events, oldest first."""
    # An entry holds at least one event: count entries are enough for count events.
    entries = get_client().xrevrange(_keys(prefix).events, count=count) or []
    return decode(entries[::-1])[-count:]


class EventFeed:
    """Follow one key prefix's lifecycle events with its own asyncio Redis client."""

    def __init__(self, prefix: str | None = None, *, poll: float = 5.0) -> None:
        self.prefix = prefix or dtq_settings.KEY_PREFIX
        self.poll = poll
        self.last_id = ORIGIN
        self._stream = _keys(self.prefix).events
        self._client: Any = None

    async def open(self, last_id: str | None) -> Batch:
        """Connect, then return what happened after last_id (None: start from now)."""
        self._client = new_async_client()
        if not valid_id(last_id):
            newest = await self._client.xrevrange(self._stream, count=1)
            self.last_id = str(newest[0][0]) if newest else ORIGIN
            return Batch(last_id=self.last_id)
        assert last_id is not None
        return await self._catch_up(last_id)

    async def _catch_up(self, last_id: str) -> Batch:
        pipe = self._client.pipeline(transaction=False)
        pipe.xrange(self._stream, "-", "+", count=1)
        pipe.xrange(self._stream, f"({last_id}", "+", count=CATCH_UP_LIMIT + 1)
        pipe.xrevrange(self._stream, count=1)
        first, entries, newest = await pipe.execute()
        # An oldest entry newer than last_id means the cap may have trimmed what came between.
        trimmed = bool(first) and _order(first[0][0]) > _order(last_id)
        if trimmed or len(entries) > CATCH_UP_LIMIT:
            self.last_id = str(newest[0][0]) if newest else ORIGIN
            return Batch(last_id=self.last_id, gap=True)
        self.last_id = str(entries[-1][0]) if entries else last_id
        return Batch(decode(entries), self.last_id)

    async def next(self) -> Batch:
        """Return the events after last_id, waiting up to `poll` seconds for some to arrive."""
        # The block must end before the client's socket timeout (BLOCK_TIMEOUT is below it).
        wait = min(float(self.poll), dtq_settings.BLOCK_TIMEOUT)
        entries = await self._client.xread(
            {self._stream: self.last_id}, count=READ_BATCH, block=max(int(wait * 1000), 1)
        )
        found = entries[0][1] if entries else []
        if found:
            self.last_id = str(found[-1][0])
        return Batch(decode(found), self.last_id)

    async def close(self) -> None:
        """Close the client."""
        if self._client is not None:
            await self._client.aclose()
        self._client = None
