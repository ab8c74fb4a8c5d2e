"""Lifecycle events for live views: catch up from the capped event streams, then follow them.

The Lua scripts write every event once, into their shard's capped stream ``Keys.events``
(field ``e``: one event as a JSON object, or the events of one script call as a JSON array).
A feed blocks in XREAD on every shard's stream after the last id it delivered from each, so
every event arrives once, with the position a client resumes from, and writing an event
costs one XADD (no PUBLISH: a script call writes its events in one entry, and a feed wakes on
it). A position is one stream id per shard, joined by ',' (with one shard: the stream id).
Events of several shards read together are merged in time order (their entries' ids).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec, shards
from dtq.engine.read_side.shard_pipe import ShardPipeline

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


def _streams(prefix: str | None) -> list[str]:
    """Return every shard's event stream, shard 0 first."""
    return [keys.events for keys in shards.every(prefix)]


def valid_id(value: object) -> bool:
    """Return True when value is a stream id Redis accepts ('<ms>-<seq>', 64 bits each)."""
    if not isinstance(value, str) or not STREAM_ID.fullmatch(value):
        return False
    return max(_order(value)) <= MAX_ID_PART


def parse_position(value: object) -> list[str] | None:
    """Return the per-shard stream ids of a position, or None unless it names every shard."""
    parts = value.split(",") if isinstance(value, str) else []
    if len(parts) != shards.count() or not all(valid_id(part) for part in parts):
        return None
    return parts


def _position(stream_ids: list[str]) -> str:
    return ",".join(stream_ids)


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


def merged(per_shard: list[list[Any]]) -> list[dict[str, Any]]:
    """Return the events of every shard's entries in time order (entry id, then shard)."""
    keyed = [
        (_order(stream_id), shard, stream_id, fields)
        for shard, entries in enumerate(per_shard)
        for stream_id, fields in entries
    ]
    return decode([(stream_id, fields) for *_, stream_id, fields in sorted(keyed)])


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
                events.extend(_each_task(event, stream_id))
    return events


def _each_task(event: dict[str, Any], stream_id: str) -> list[dict[str, Any]]:
    """Return an event as one per task: a hot event of many tasks (lib.lua's event_of_many)
    lists them in `tasks`, their attempts in `attempts`, the same place."""
    tasks, attempts = event.pop("tasks", None), event.pop("attempts", None)
    if not isinstance(tasks, list) or not isinstance(attempts, list):
        event["id"] = stream_id
        return [event]
    head = {"type": event.pop("type", None)}
    return [
        {
            **head,
            "task": task,
            "queue": event.get("queue"),
            "state": event.get("state"),
            "attempt": attempt,
            **event,
            "id": stream_id,
        }
        for task, attempt in zip(tasks, attempts, strict=False)
    ]


def _newest(prefix: str | None, count: int) -> list[list[Any]]:
    """Return up to count newest entries of each shard's stream, oldest first."""
    pipe = ShardPipeline()
    for shard, stream in enumerate(_streams(prefix)):
        pipe.on(shard).xrevrange(stream, count=count)
    return [(entries or [])[::-1] for entries in pipe.execute()]


def latest_id(prefix: str | None = None) -> str:
    """Return the position of the newest event of every shard (origins where there is none)."""
    return _position([str(e[-1][0]) if e else ORIGIN for e in _newest(prefix, 1)])


def recent(prefix: str | None = None, count: int = 50) -> list[dict[str, Any]]:
    """Return up to count newest events over every shard, oldest first."""
    # An entry holds at least one event: count entries of each shard are enough.
    return merged(_newest(prefix, count))[-count:]


class EventFeed:
    """Follow one key prefix's lifecycle events with its own asyncio Redis clients.

    Shards whose keys one client reaches (all of them on one server) are read by one XREAD
    on that client; on a Redis Cluster each primary gets its own client and read, and a read
    still waiting when another answered is kept for the next call (never sent twice).
    """

    def __init__(self, prefix: str | None = None, *, poll: float = 5.0) -> None:
        self.prefix = prefix or dtq_settings.KEY_PREFIX
        self.poll = poll
        self._streams = _streams(self.prefix)
        self.last_ids = [ORIGIN] * len(self._streams)
        self._groups = _groups(len(self._streams))
        self._clients: list[Any] = []
        self._reads: dict[int, asyncio.Task[Any]] = {}  # group -> its XREAD in flight

    @property
    def last_id(self) -> str:
        """Return the position after the last event delivered (pass it to open() to resume)."""
        return _position(self.last_ids)

    async def open(self, last_id: str | None) -> Batch:
        """Connect, then return what happened after last_id (None: start from now)."""
        self._clients = [shards.new_async_client(group[0]) for group in self._groups]
        position = parse_position(last_id)
        if position is None:
            newest = await self._each(lambda pipe, stream, _: pipe.xrevrange(stream, count=1), 1)
            self.last_ids = [str(rows[0][0]) if rows else ORIGIN for (rows,) in newest]
            return Batch(last_id=self.last_id)
        return await self._catch_up(position)

    async def _each(self, queue: Callable[[Any, str, int], Any], per_shard: int) -> list[Any]:
        """Queue per_shard commands per shard (queue(pipe, stream, shard)), one pipeline per
        client; return each shard's replies, by shard."""
        replies: list[Any] = [None] * len(self._streams)
        for client, group in zip(self._clients, self._groups, strict=True):
            pipe = client.pipeline(transaction=False)
            for shard in group:
                queue(pipe, self._streams[shard], shard)
            answers = await pipe.execute()
            for n, shard in enumerate(group):
                replies[shard] = answers[n * per_shard : (n + 1) * per_shard]
        return replies

    async def _catch_up(self, position: list[str]) -> Batch:
        def queue(pipe: Any, stream: str, shard: int) -> None:
            pipe.xrange(stream, "-", "+", count=1)
            pipe.xrange(stream, f"({position[shard]}", "+", count=CATCH_UP_LIMIT + 1)
            pipe.xrevrange(stream, count=1)

        replies = await self._each(queue, 3)
        # An oldest entry newer than last_id means the cap may have trimmed what came between.
        trimmed = any(
            first and _order(first[0][0]) > _order(position[shard])
            for shard, (first, _, _) in enumerate(replies)
        )
        found = [entries for _, entries, _ in replies]
        if trimmed or sum(len(entries) for entries in found) > CATCH_UP_LIMIT:
            self.last_ids = [str(newest[0][0]) if newest else ORIGIN for *_, newest in replies]
            return Batch(last_id=self.last_id, gap=True)
        self.last_ids = [
            str(entries[-1][0]) if entries else position[shard]
            for shard, entries in enumerate(found)
        ]
        return Batch(merged(found), self.last_id)

    async def next(self) -> Batch:
        """Return the events after last_id, waiting up to `poll` seconds for some to arrive."""
        # The block must end before the client's socket timeout (BLOCK_TIMEOUT is below it).
        wait = min(float(self.poll), dtq_settings.BLOCK_TIMEOUT)
        block = max(int(wait * 1000), 1)
        for n, (client, group) in enumerate(zip(self._clients, self._groups, strict=True)):
            if n not in self._reads:
                streams = {self._streams[shard]: self.last_ids[shard] for shard in group}
                read = client.xread(streams, count=READ_BATCH, block=block)
                self._reads[n] = asyncio.ensure_future(read)
        done, _ = await asyncio.wait(self._reads.values(), return_when=asyncio.FIRST_COMPLETED)
        found: list[list[Any]] = [[] for _ in self._streams]
        for n, read in list(self._reads.items()):
            if read not in done:
                continue
            del self._reads[n]
            for stream, entries in read.result() or []:
                shard = self._streams.index(stream)
                found[shard] = entries
                self.last_ids[shard] = str(entries[-1][0])
        return Batch(merged(found), self.last_id)

    async def close(self) -> None:
        """Close the clients (a read still in flight ends with its connection)."""
        reads = list(self._reads.values())
        self._reads.clear()
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
        for client in self._clients:
            await client.aclose()
        self._clients = []


def _groups(count: int) -> list[list[int]]:
    """Return the shards grouped by the client that reaches them, in shard order."""
    groups: dict[int, list[int]] = {}
    for shard in range(count):
        groups.setdefault(id(shards.client(shard)), []).append(shard)
    return list(groups.values())
