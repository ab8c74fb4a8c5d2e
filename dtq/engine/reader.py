"""The worker's reads: a batch read by read.lua, or one blocking group read when idle."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import gateway
from dtq.engine.direct import pack
from dtq.engine.keys import GROUP


class ReadingMixin:
    """Reading entries for a Worker (see worker.py for the state)."""

    # Set by Worker.__init__ / Worker.main.
    worker_id: str
    queues: list[str]
    keys: Any
    stopping: bool
    _client: Any
    _fetcher: Any
    _blocker: Any
    _blocked_id: int | None
    _unblocking: asyncio.Task[None] | None
    _stream_blocks: dict[str, tuple[int, int]]

    async def _read(self, capacity: int) -> tuple[list[gateway.Entry], list[str]]:
        """Read up to capacity entries in priority order; also return the streams to watch."""
        return await gateway.read(self._fetcher, self.keys, self.queues, self.worker_id, capacity)

    async def _wait_for_new(self, watch: list[str], capacity: int) -> list[gateway.Entry]:
        """Block in XREADGROUP on the watched streams; return what arrived, read as ours.

        Reading in the group hands an arriving entry to one idle worker only, and saves
        the second read. A stop ends the block with CLIENT UNBLOCK (the read returns empty),
        never by cancelling it: a cancelled read could drop entries Redis handed it.
        """
        streams = watch
        block_ms = int(float(dtq_settings.BLOCK_TIMEOUT) * 1000)
        read = pack(
            *("XREADGROUP", "GROUP", GROUP, self.worker_id, "COUNT", capacity, "BLOCK", block_ms),
            *("STREAMS", *streams, *([">"] * len(streams))),
        )
        conn = await self._blocker.connection()
        try:
            await conn.send_packed_command([pack("CLIENT", "ID"), read])
            self._blocked_id = await conn.read_response()
            if self.stopping:
                self._unblock()
            reply = await conn.read_response()
        except BaseException:
            await conn.disconnect()  # the stream may hold half a reply
            raise
        finally:
            self._blocked_id = None
        return self._entries(reply or [])

    def _unblock(self) -> None:
        """End the blocking read with CLIENT UNBLOCK (the read then returns nothing)."""

        async def unblock() -> None:
            while self._blocked_id is not None:
                with contextlib.suppress(RedisError):
                    await self._client.client_unblock(self._blocked_id)
                await asyncio.sleep(0.05)  # the read may not have reached Redis yet

        self._unblocking = asyncio.get_running_loop().create_task(unblock())

    def _entries(self, streams: Any) -> list[gateway.Entry]:
        """Turn an XREADGROUP reply (a RESP3 map or RESP2 pairs) into entries, as read.lua's."""
        out: list[gateway.Entry] = []
        for stream, items in streams.items() if isinstance(streams, dict) else streams:
            qi, band = self._stream_blocks[stream]
            for eid, fields in items:
                f = dict(zip(fields[::2], fields[1::2], strict=True))
                out.append(gateway.Entry(qi, band, eid, f.get("t", ""), f.get("i", "")))
        return out
