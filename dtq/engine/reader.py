"""The worker's reader: batch reads by read.lua, one blocking group read when idle, claims."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import clock, gateway, workflows
from dtq.engine.direct import AsyncCaller, pack
from dtq.engine.executor import Attempt, start_by
from dtq.engine.keys import BANDS, GROUP, Keys


class Reader:
    """Reads and claims entries for one worker; owns the read connections and the stream map."""

    def __init__(self, client: Any, keys: Keys, queues: list[str], worker_id: str) -> None:
        self._client = client
        self._keys = keys
        self._queues = queues
        self._worker_id = worker_id
        self._caller = AsyncCaller(client)  # read.lua and claim.lua
        self._blocker = AsyncCaller(client)  # the blocking group read
        self._stream_blocks = {
            keys.stream(queue, band): (qi, band)
            for qi, queue in enumerate(queues, 1)
            for band in BANDS
        }
        self._stopping = False
        self._blocked_id: int | None = None  # our client id while blocked in a read
        self._unblocking: asyncio.Task[None] | None = None
        self.unclaimed: list[gateway.Entry] = []  # read entries whose claim failed: sent again

    async def read(self, capacity: int) -> tuple[list[gateway.Entry], list[str]]:
        """Read up to capacity entries in priority order; also return the streams to watch."""
        return await gateway.read(self._caller, self._keys, self._queues, self._worker_id, capacity)

    async def wait_for_new(self, watch: list[str], capacity: int) -> list[gateway.Entry]:
        """Block in XREADGROUP on the watched streams; return what arrived, read as ours.

        Reading in the group hands an arriving entry to one idle worker only, and saves
        the second read. A stop ends the block with CLIENT UNBLOCK (the read returns empty),
        never by cancelling it: a cancelled read could drop entries Redis handed it.
        """
        streams = watch
        block_ms = int(dtq_settings.BLOCK_TIMEOUT * 1000)
        read = pack(
            *("XREADGROUP", "GROUP", GROUP, self._worker_id, "COUNT", capacity, "BLOCK", block_ms),
            *("STREAMS", *streams, *([">"] * len(streams))),
        )
        conn = await self._blocker.connection()
        try:
            await conn.send_packed_command([pack("CLIENT", "ID"), read])
            self._blocked_id = await conn.read_response()
            if self._stopping:
                self._unblock()
            reply = await conn.read_response()
        except BaseException:
            await conn.disconnect()  # the stream may hold half a reply
            raise
        finally:
            self._blocked_id = None
        return self._entries(reply or [])

    async def claim(self, entries: list[gateway.Entry]) -> list[Attempt]:
        """Claim read entries with claim.lua; keep them for the next claim if the call fails."""
        lease = dtq_settings.lease_timeout
        sent = clock.now()  # before the call: Redis starts the lease later than this
        try:
            attempts = await gateway.claim(
                self._caller, self._keys, self._queues, entries, self._worker_id, int(lease * 1000)
            )
        except RedisError:  # the entries sit in our pending list, where no read finds them
            self.unclaimed = entries
            raise
        for att in attempts:
            att.lease_until = start_by(sent, lease)
            att.workflow, att.workflow_member = workflows.member_of(att.payload)
        return attempts

    async def claim_unclaimed(self) -> list[Attempt]:
        """Claim again the entries whose last claim failed."""
        entries, self.unclaimed = self.unclaimed, []
        return await self.claim(entries)

    def stop(self) -> None:
        """End a blocking read now, and any that starts from here on."""
        self._stopping = True
        if self._blocked_id is not None:
            self._unblock()

    async def aclose(self) -> None:
        """Give back the read connections."""
        await self._caller.aclose()
        await self._blocker.aclose()

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
