"""The worker's liveness: heartbeats that renew leases and pick up cancel requests."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import clock, codec, gateway, registry
from dtq.engine.direct import AsyncCaller
from dtq.engine.executor import Attempt, start_by
from dtq.engine.refusals import WriteRefusals

log = logging.getLogger("dtq.worker")


class LivenessMixin:
    """Heartbeat, lease renewal and registration of a Worker (see worker.py for the state)."""

    # Set by Worker.__init__ / Worker.main.
    worker_id: str
    queues: list[str]
    concurrency: int
    held: dict[str, Attempt]
    stuck: set[Attempt]
    processed: int
    stopping: bool
    keys: Any
    refusals: WriteRefusals
    _client: Any
    _flusher: AsyncCaller
    _beater: AsyncCaller

    async def _heartbeat_loop(self) -> None:
        """Beat every HEARTBEAT_INTERVAL until cancelled; Redis errors never end it."""
        interval = float(dtq_settings.HEARTBEAT_INTERVAL)
        while True:
            try:
                await self._heartbeat()
                # The one judge of "writes accepted again": under OOM Redis still runs a script
                # whose first write adds no memory (finalize.lua), which says nothing of others.
                self.refusals.accepted()
            except RedisError as exc:
                self.refusals.report(exc, "sending the heartbeat", interval)
            await asyncio.sleep(interval)

    async def _heartbeat(self) -> None:
        """Renew the leases of held attempts and publish this worker's liveness."""
        held = list(self.held.values())
        now = time.time()
        lease = dtq_settings.lease_timeout
        if held:
            sent = clock.now()
            # The heartbeat owns its script connection: the fetch and flush loops run meanwhile.
            statuses = await gateway.renew(self._beater, self.keys, held, int(lease * 1000))
            self._apply_renewals(held, statuses, start_by(sent, lease))
        pipe = self._client.pipeline(transaction=False)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.hset(self.keys.worker(self.worker_id), mapping=self._info(now))
        pipe.expire(self.keys.worker(self.worker_id), int(dtq_settings.RETENTION))
        await pipe.execute()

    def _apply_renewals(self, held: list[Attempt], statuses: list[int], until: float) -> None:
        """Extend or mark lost each attempt's lease; pass cancel requests on to the handlers."""
        for att, status in zip(held, statuses, strict=True):
            if att.done:
                continue  # handler finished: its finalize (and the fence) decide from here
            if status and clock.now() < att.lease_until:
                # Only a lease that never lapsed by our clock is extended: once past its
                # deadline an attempt never starts, even if a late renewal still finds it ours.
                att.lease_until = until
            if status == 0 and not att.lost:
                att.lost = True
                log.warning("task_id=%s attempt=%s: lease lost to the reaper", att.id, att.attempt)
                # Tell a handler that began, so it can stop early (its outcome is fenced out
                # anyway); one that did not is refused by the start check.
                self._tell_handler(att, interrupt=att.began)
            elif status == 2 and not att.cancel.is_set():
                self._tell_handler(att, interrupt=True)

    def _tell_handler(self, att: Attempt, interrupt: bool) -> None:
        """Raise the cancel flag of an attempt; interrupt it too if its handler is async."""
        att.cancel.set()
        if interrupt and att.handle is not None and self._registry_is_async(att):
            att.handle.cancel()

    @staticmethod
    def _registry_is_async(att: Attempt) -> bool:
        task = registry.get(att.name)
        return bool(task is not None and task.is_async)

    def _info(self, now: float) -> dict[str, Any]:
        """Return what the read side shows about this worker."""
        return {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": codec.dumps(self.queues),
            "concurrency": self.concurrency,
            "in_flight": len(self.held),
            "stuck": len(self.stuck),
            "processed": self.processed,
            "heartbeat": now,
            "state": "draining" if self.stopping else "running",
        }

    async def _deregister(self) -> None:
        """Leave the worker registry, unless entries are still pending under our name."""
        try:
            holding = await gateway.forget_consumer_async(
                self._flusher, self.keys, self.queues, self.worker_id
            )
            if holding:
                return  # entries still pending under our name: the reaper settles them
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(self.keys.workers, self.worker_id)
            pipe.delete(self.keys.worker(self.worker_id))
            await pipe.execute()
        except RedisError as exc:
            log.warning("could not deregister worker_id=%s: %s", self.worker_id, exc)
