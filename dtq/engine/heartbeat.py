"""The worker's heartbeat: renews leases, passes cancel requests on, keeps the worker registered.

Leases are renewed in the shard of each task; the registration lives in shards.HOME.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import clock, gateway, ids, registry, shards
from dtq.engine.direct import AsyncCaller
from dtq.engine.executor import Attempt, start_by
from dtq.engine.latency import Latencies
from dtq.engine.refusals import WriteRefusals
from dtq.engine.runner import Runner

log = logging.getLogger("dtq.worker")


class Heartbeat:
    """Owns lease renewals and this worker's entry in the worker registry."""

    def __init__(
        self,
        clients: dict[int, Any],
        queues: list[str],
        worker_id: str,
        runner: Runner,
        describe: Callable[[float], dict[str, Any]],
        refusals: WriteRefusals,
        latencies: Latencies,
    ) -> None:
        self._client = clients[shards.HOME]  # the worker registry's
        self._keys = shards.keys(shards.HOME)
        self._queues = queues
        self._worker_id = worker_id
        self._runner = runner  # whose held attempts are renewed
        self._describe = describe  # what the read side shows about this worker, at a time
        self._refusals = refusals
        self._latencies = latencies  # written to the queues' stats hashes at every beat
        self._clients = clients
        # The heartbeat owns its script connections: the fetch and flush loops run meanwhile.
        self._callers = {
            shard: (shards.keys(shard), AsyncCaller(client)) for shard, client in clients.items()
        }

    async def loop(self) -> None:
        """Beat every HEARTBEAT_INTERVAL until cancelled; Redis errors never end it."""
        interval = dtq_settings.HEARTBEAT_INTERVAL
        while True:
            try:
                await self.beat()
                # The one judge of "writes accepted again": under OOM Redis still runs a script
                # whose first write adds no memory (finalize.lua), which says nothing of others.
                self._refusals.accepted()
            except RedisError as exc:
                self._refusals.report(exc, "sending the heartbeat", interval)
            await asyncio.sleep(interval)

    async def beat(self) -> None:
        """Renew the leases of held attempts and publish this worker's liveness."""
        held = list(self._runner.held.values())
        now = time.time()
        lease = dtq_settings.lease_timeout
        failed: RedisError | None = None
        if held:
            sent = clock.now()
            for shard, attempts in self._by_shard(held).items():
                keys, caller = self._callers[shard]
                try:
                    statuses = await gateway.renew(caller, keys, attempts, int(lease * 1000))
                except RedisError as exc:  # the other shards' leases are renewed all the same
                    failed = failed or exc
                    continue
                self._apply_renewals(attempts, statuses, start_by(sent, lease))
        try:
            await self.add_latencies()
        except RedisError as exc:
            failed = failed or exc
        pipe = self._client.pipeline(transaction=False)
        pipe.zadd(self._keys.workers, {self._worker_id: now})
        pipe.hset(self._keys.worker(self._worker_id), mapping=self._describe(now))
        pipe.expire(self._keys.worker(self._worker_id), dtq_settings.RETENTION)
        await pipe.execute()
        if failed is not None:
            raise failed

    async def add_latencies(self) -> None:
        """Add the latency counts observed since the last beat to their queues' stats hashes.

        One pipelined HINCRBY per field; counts of a shard whose pipeline failed are kept for
        the next beat (a reply lost after Redis applied them counts them twice: statistics).
        """
        by_shard: dict[int, dict[tuple[int, str], dict[str, int]]] = {}
        for place, fields in self._latencies.take().items():
            by_shard.setdefault(place[0], {})[place] = fields
        failed: RedisError | None = None
        for shard, counts in by_shard.items():
            keys = shards.keys(shard)
            pipe = self._clients[shard].pipeline(transaction=False)
            for (_, queue), fields in counts.items():
                for name, n in fields.items():
                    pipe.hincrby(keys.stats(queue), name, n)
            try:
                await pipe.execute()
            except RedisError as exc:
                self._latencies.put_back(counts)
                failed = failed or exc
        if failed is not None:
            raise failed

    async def deregister(self) -> None:
        """Write the last latency counts, then leave the worker registry, unless entries are
        still pending under our name."""
        try:
            await self.add_latencies()
            holding = 0
            for keys, caller in self._callers.values():
                holding += await gateway.forget_consumer_async(
                    caller, keys, self._queues, self._worker_id
                )
            if holding:
                return  # entries still pending under our name: the reaper settles them
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(self._keys.workers, self._worker_id)
            pipe.delete(self._keys.worker(self._worker_id))
            await pipe.execute()
        except RedisError as exc:
            log.warning("could not deregister worker_id=%s: %s", self._worker_id, exc)

    async def aclose(self) -> None:
        """Give back the heartbeat's script connections."""
        for _, caller in self._callers.values():
            await caller.aclose()

    def _by_shard(self, held: list[Attempt]) -> dict[int, list[Attempt]]:
        """Group attempts by the shard of their task (a task id names its shard)."""
        if len(self._callers) == 1:
            return {next(iter(self._callers)): held}
        groups: dict[int, list[Attempt]] = {}
        for att in held:
            groups.setdefault(ids.shard_of(att.id), []).append(att)
        return groups

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
                _tell_handler(att, interrupt=att.began)
            elif status == 2 and not att.cancel.is_set():
                _tell_handler(att, interrupt=True)


def _tell_handler(att: Attempt, interrupt: bool) -> None:
    """Raise the cancel flag of an attempt; interrupt it too if its handler is async."""
    att.cancel.set()
    if interrupt and att.handle is not None and _is_async(att):
        att.handle.cancel()


def _is_async(att: Attempt) -> bool:
    task = registry.get(att.name)
    return bool(task is not None and task.is_async)
