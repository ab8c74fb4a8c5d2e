"""The worker's reader of one shard: batch reads and claims by take.lua, a blocking group read
and claim.lua for what it brought."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from redis.exceptions import RedisError, ResponseError

from dtq.conf import dtq_settings
from dtq.engine import clock, gateway, workflows
from dtq.engine.direct import AsyncCaller, missing, pack
from dtq.engine.executor import Attempt, start_by
from dtq.engine.finalizer import MAX_BACKOFF
from dtq.engine.keys import BANDS, GROUP, Keys
from dtq.engine.scripts import script


class Reader:
    """Reads and claims one shard's entries for a worker; owns its read connections and streams."""

    def __init__(self, client: Any, keys: Keys, queues: list[str], worker_id: str) -> None:
        self._client = client
        self._keys = keys
        self._queues = queues
        self._worker_id = worker_id
        self._caller = AsyncCaller(client)  # take.lua and claim.lua
        self._blocker = AsyncCaller(client)  # the blocking group read
        self._stream_blocks = {
            keys.stream(queue, band): (qi, band)
            for qi, queue in enumerate(queues, 1)
            for band in BANDS
        }
        self._stopping = False
        self._waking = False  # end the blocking read under way (wake), not the ones after it
        self._blocked_id: int | None = None  # our client id while blocked in a read
        self._blocks = 0  # blocking reads started: an unblock ends only the one it was for
        self._unblocking: asyncio.Task[None] | None = None
        # Entries read as ours but not claimed yet: their claim failed, a blocking read
        # brought more than the free capacity, or take.lua could not reach a key of theirs.
        # They sit in our pending list, where no read finds them again, so they are claimed
        # from here first when capacity allows.
        self.unclaimed: list[gateway.Entry] = []
        # After an error the worker skips this shard for a backoff and serves the others
        # (a cluster primary failing over must not stop the rest).
        self._rest = 0.0
        self._rest_until = 0.0
        # take.lua's request token, kept with when it was first sent until a reply arrives: a
        # call sent again after a failure gets back what the lost reply claimed. Random per
        # process: a worker id used again must never get an earlier process's reply.
        self._token_base = os.urandom(6).hex()
        self._takes = 0
        self._token: tuple[str, float] | None = None
        # The newest entry id of each stream (queue index, band) this worker was delivered:
        # a take sent behind a blocking read claims what the read delivered after it.
        self._newest: dict[tuple[int, int], tuple[int, int]] = {}
        self.round_trip = 0.0  # seconds a take took lately (a moving average)

    @property
    def shard(self) -> int:
        """The shard this reader reads."""
        return self._keys.shard

    def rest(self) -> float:
        """Skip this shard for a backoff after an error (doubling); return how long."""
        self._rest = min(max(self._rest * 2, 0.05), MAX_BACKOFF)
        self._rest_until = time.monotonic() + self._rest
        return self._rest

    def resting(self) -> bool:
        """Return True while this shard's backoff after an error lasts."""
        return self._rest_until > time.monotonic()

    def recovered(self) -> None:
        """Forget the backoff: this shard answered."""
        self._rest = 0.0

    async def take(self, capacity: int) -> gateway.Taken:
        """Read and claim up to capacity new entries in priority order, in one call (take.lua).

        A failed call's token is sent again by the next one (within a lease): what the lost
        reply claimed comes back then instead of waiting, unrun, for the reaper.
        """
        lease = dtq_settings.lease_timeout
        now = clock.now()  # before the call: Redis starts the lease later than this
        sent = time.monotonic()
        taken = await gateway.take(
            self._caller,
            self._keys,
            self._queues,
            self._worker_id,
            int(lease * 1000),
            capacity,
            self._take_token(now, lease),
        )
        self.round_trip += (time.monotonic() - sent - self.round_trip) / 8
        return self._taken(taken, now, lease)

    async def wait_and_take(self, watch: list[str], capacity: int) -> gateway.Taken:
        """Block in XREADGROUP on the watched streams and claim what arrives in the same trip.

        take.lua goes in the same pipeline right behind the blocking read, so Redis claims
        what the read delivered the moment it returns (up to capacity; the rest is left to
        claim.lua, kept here): no round trip between an arrival and its handler's start.
        """
        lease = dtq_settings.lease_timeout
        watched = set(watch)
        after = [
            "{}-{}".format(*self._newest.get(block, (0, 0))) if stream in watched else ""
            for stream, block in self._stream_blocks.items()
        ]
        call = gateway.take_call(
            self._keys,
            self._queues,
            self._worker_id,
            int(lease * 1000),
            capacity,
            self._take_token(clock.now(), lease),
            after,
        )
        read, offset, reply = await self._block(watch, capacity, call)
        delivered = self._entries(read or [])
        self._note(delivered)
        if isinstance(reply, ResponseError):
            self.keep(delivered)  # none of them claimed: claim.lua's turn
            if not missing(reply):
                raise reply
            await self._blocker.forget(await self._blocker.connection(), script("take"))
            return gateway.Taken([], [], 0, False, [], 0)
        taken = gateway.taken(reply, self._queues)
        if taken.again:  # it handed back an earlier send's claims and never looked at these
            self.keep(delivered)
        # The leases began when the read returned, up to BLOCK_TIMEOUT after the send: take.lua's
        # clock moved onto ours (never later than it happened there), not the send's instant.
        return self._taken(taken, offset + taken.now_ms / 1000, lease)

    def _take_token(self, now: float, lease: float) -> str:
        """Return take.lua's request token: a failed call's again (within a lease), else new."""
        if self._token is None or now - self._token[1] > lease:
            self._takes += 1
            self._token = (f"{self._token_base}.{self._takes}", now)
        return self._token[0]

    def _taken(self, taken: gateway.Taken, now: float, lease: float) -> gateway.Taken:
        """Note a take's reply: its token is spent, its attempts start, what it left is kept."""
        self._token = None
        # A resend renewed the leases it handed back: they run from this call, as new ones.
        self._started(taken.attempts, now, lease)
        self._note(taken.attempts)
        self.keep(taken.left)
        return taken

    async def wait_for_new(self, watch: list[str], capacity: int) -> list[gateway.Entry]:
        """Block in XREADGROUP on the watched streams; return what arrived, read as ours.

        Reading in the group hands an arriving entry to one idle worker only, and saves
        the second read.
        """
        read, _, _ = await self._block(watch, capacity)
        entries = self._entries(read or [])
        self._note(entries)
        return entries

    async def _block(
        self, watch: list[str], capacity: int, behind: gateway.Call | None = None
    ) -> tuple[Any, float, Any]:
        """Send a blocking XREADGROUP, with behind (a take.lua call) right after it in the
        same pipeline, and TIME right before it; return the read's reply, the offset from
        Redis' clock to ours (s) and behind's reply (an error reply as its exception).

        The offset is our lease clock read just before the send minus TIME's answer: a Redis
        instant plus it is never later on our clock than it really was, however long a pause
        (or a freeze of this process) fell before the send.

        A stop or a wake ends the block with CLIENT UNBLOCK (the read returns empty), never by
        cancelling it: a cancelled read could drop entries Redis handed it.
        """
        self._waking = False  # before the first await: a wake() from here on ends this read
        self._blocks += 1
        block_ms = int(dtq_settings.BLOCK_TIMEOUT * 1000)
        read = pack(
            *("XREADGROUP", "GROUP", GROUP, self._worker_id, "COUNT", capacity, "BLOCK", block_ms),
            *("STREAMS", *watch, *([">"] * len(watch))),
        )
        conn = await self._blocker.connection()
        pipeline = [pack("CLIENT", "ID"), read]
        if behind:
            take = await self._blocker.packed(conn, script("take"), *behind)
            pipeline = [pack("CLIENT", "ID"), pack("TIME"), read, take]
        try:
            sent = clock.now()
            await conn.send_packed_command(pipeline)
            self._blocked_id = await conn.read_response()
            if self._stopping or self._waking:
                self._unblock()
            offset = 0.0
            if behind:
                seconds, micros = await conn.read_response()
                offset = sent - (int(seconds) + int(micros) / 1_000_000)
            reply = await conn.read_response()
            reply_behind = None
            if behind:
                try:
                    reply_behind = await conn.read_response()
                except ResponseError as exc:  # read whole: the connection is fine
                    reply_behind = exc
        except BaseException:
            await conn.disconnect()  # the stream may hold half a reply
            raise
        finally:
            self._blocked_id = None
        return reply, offset, reply_behind

    async def claim(self, entries: list[gateway.Entry]) -> list[Attempt]:
        """Claim entries a blocking read brought with claim.lua; keep them if the call fails."""
        lease = dtq_settings.lease_timeout
        sent = clock.now()  # before the call: Redis starts the lease later than this
        try:
            attempts = await gateway.claim(
                self._caller, self._keys, self._queues, entries, self._worker_id, int(lease * 1000)
            )
        except RedisError:  # the entries sit in our pending list, where no read finds them
            self.unclaimed = entries + self.unclaimed
            raise
        self._started(attempts, sent, lease)
        self._note(attempts)
        return attempts

    @staticmethod
    def _started(attempts: list[Attempt], sent: float, lease: float) -> None:
        """Note each claimed attempt's start-by instant and its workflow place."""
        for att in attempts:
            att.lease_until = start_by(sent, lease)
            att.workflow, att.workflow_member = workflows.member_of(att.payload)

    async def claim_unclaimed(self, capacity: int) -> list[Attempt]:
        """Claim up to capacity of the entries read but not claimed yet, oldest first."""
        entries, self.unclaimed = self.unclaimed[:capacity], self.unclaimed[capacity:]
        return await self.claim(entries)

    def keep(self, entries: list[gateway.Entry]) -> None:
        """Keep entries a blocking read brought, to be claimed as capacity allows."""
        self.unclaimed.extend(entries)

    def stop(self) -> None:
        """End a blocking read now, and any that starts from here on."""
        self._stopping = True
        if self._blocked_id is not None:
            self._unblock()

    def wake(self) -> None:
        """End the blocking read under way now (it returns what Redis already handed it)."""
        self._waking = True
        if self._blocked_id is not None:
            self._unblock()

    async def aclose(self) -> None:
        """Give back the read connections."""
        await self._caller.aclose()
        await self._blocker.aclose()

    def _unblock(self) -> None:
        """End the blocking read with CLIENT UNBLOCK (the read then returns nothing)."""

        block = self._blocks  # the blocker's client id stays the same for the next read

        async def unblock() -> None:
            while self._blocked_id is not None and self._blocks == block:
                with contextlib.suppress(RedisError):
                    await self._client.client_unblock(self._blocked_id)
                await asyncio.sleep(0.05)  # the read may not have reached Redis yet

        self._unblocking = asyncio.get_running_loop().create_task(unblock())

    def _note(self, items: list[gateway.Entry] | list[Attempt]) -> None:
        """Remember the newest entry id of each stream among items (entries or attempts)."""
        newest = self._newest
        for item in items:
            ms, seq = item.entry.split("-")
            at = (int(ms), int(seq))
            where = (item.queue_index, item.band)
            if at > newest.get(where, (0, 0)):
                newest[where] = at

    def _entries(self, streams: Any) -> list[gateway.Entry]:
        """Turn an XREADGROUP reply (a RESP3 map or RESP2 pairs) into entries, as read.lua's."""
        out: list[gateway.Entry] = []
        for stream, items in streams.items() if isinstance(streams, dict) else streams:
            qi, band = self._stream_blocks[stream]
            for eid, fields in items:
                f = dict(zip(fields[::2], fields[1::2], strict=True))
                out.append(gateway.Entry(qi, band, eid, f.get("t", ""), f.get("i", "")))
        return out
