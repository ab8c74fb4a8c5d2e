"""The reaper: recover attempts of dead or stalled workers, apply retention, forget queues."""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import ResponseError

from dtq.conf import dtq_settings
from dtq.engine import dlq, failpoints, gateway, layout, shards, workflows
from dtq.engine.declared import declared
from dtq.engine.keys import BANDS, GROUP, Keys
from dtq.engine.layout import STATE_ORDER
from dtq.engine.periodic import Periodic
from dtq.engine.state import TERMINAL_STATES, TaskState

RETENTION_EVERY = 60.0  # seconds between retention sweeps
FORGET_BATCH = 100  # undeclared queues looked at per retention sweep
# Every reaper claims into one consumer name, so the group does not collect a consumer per
# reaper process; entries it leaves pending belong to live attempts and are acked by them.
REAPER_CONSUMER = "dtq-reaper"


class Reaper(Periodic):
    """Reclaims expired leases, settles entries of dead consumers, backstops the PEL.

    Each pass does every shard; the worker registry it judges consumers by lives in HOME.
    """

    role = "reaper"

    def __init__(self, process_id: str | None = None) -> None:
        super().__init__(process_id)
        self.cursors: dict[str, str] = {}
        self.last_retention = 0.0
        self.forget_after: dict[int, str] = {}  # per shard: the queue the last sweep stopped at
        self.server_ids: tuple[str, ...] | None = None  # run_ids of the primaries last seen
        self.servers_changed_at: float | None = None  # monotonic time another server answered

    def longest_sleep(self) -> float:
        """Return REAPER_INTERVAL: the reaper sleeps that long between passes."""
        return dtq_settings.REAPER_INTERVAL

    def run_once(self) -> int:
        """Do one pass of every duty; return how many tasks or entries were settled."""
        if self.redis_just_started() or self.writes_just_resumed():
            return 0
        settled = self.reclaim_expired_leases()
        settled += self.settle_dead_consumers()
        settled += self.sweep_idle_entries()
        for keys in shards.every():  # workflows left due by a dead process
            settled += workflows.advance_due(keys)
        if time.monotonic() - self.last_retention > RETENTION_EVERY:
            self.apply_retention()
            self.last_retention = time.monotonic()
        return settled

    def redis_just_started(self) -> bool:
        """Return True while a primary holding a shard has been up, or been the server this
        reaper reaches, for less than two lease timeouts.

        Nobody could renew a lease or write a heartbeat while Redis was down, so right after a
        restart expired leases and silent workers say nothing about who is alive: give live
        workers the time to reconnect and renew (the dead-worker test also waits two leases).
        A failover is the same outage, but the promoted replica has been up for long: another
        server answering (a new run_id) counts from the pass that first sees it.
        """
        # Every primary holding a shard (one on one server): any of them may have restarted.
        primaries = {id(c): c for c in (shards.client(n) for n in shards.numbers())}
        try:
            servers = [client.info("server") for client in primaries.values()]
        except ResponseError:  # INFO disabled (some managed services): no restart detection
            return False
        now, window = time.monotonic(), 2 * dtq_settings.lease_timeout
        run_ids = tuple(sorted(str(server.get("run_id")) for server in servers))
        if run_ids != self.server_ids:
            if self.server_ids is not None:
                self.servers_changed_at = now
            self.server_ids = run_ids
        changed = self.servers_changed_at is not None and now - self.servers_changed_at < window
        uptime = min(int(server.get("uptime_in_seconds", 0)) for server in servers)
        return changed or uptime < window

    def writes_just_resumed(self) -> bool:
        """Return True while Redis refuses writes, and for two lease timeouts after.

        As after a restart, no lease could be renewed and no heartbeat written meanwhile:
        live workers get the time to renew before anything of theirs counts as lost.
        """
        return self.refusals.recent(2 * dtq_settings.lease_timeout)

    @property
    def use_dlq(self) -> bool:
        return bool(dtq_settings.DLQ_ENABLED)

    def reclaim_expired_leases(self) -> int:
        """Requeue (or dead-letter) RUNNING tasks whose lease ran out, in every shard."""
        return sum(self._reclaim(keys) for keys in shards.every())

    def _reclaim(self, keys: Keys) -> int:
        # Each queue's RUNNING index is scored by lease deadline: its due members are the
        # leases that ran out (reclaim.lua judges each by the record's own lease).
        due: list[tuple[str, str]] = []
        for queue in self._known_queues(keys):
            left = dtq_settings.REAPER_BATCH - len(due)
            if left <= 0:
                break
            due += [(queue, i) for i in self.due(keys, keys.index(queue, TaskState.RUNNING), left)]
        if not due:
            return 0
        ids = [task_id for _, task_id in due]
        # The queue is the index's: a record gone or moved still leaves that index's entry.
        refs = [
            layout.TaskRef(task_id, queue, ref.idem)
            for (queue, task_id), ref in zip(due, self.task_refs(keys, ids), strict=True)
        ]
        places = workflows.places_of(keys, ids)  # a member dead-lettered here is counted there
        client = shards.client(keys.shard)
        requeued, dead, _ = gateway.reclaim(client, keys, refs, self.use_dlq, places)
        if dead and any(w for w, _ in places):  # stop or go on at once
            workflows.advance_due(keys, stale_ms=0)
        if requeued or dead:
            self.log.info("reclaimed lost attempts requeued=%s dead_lettered=%s", requeued, dead)
        if failpoints.ACTIVE:
            failpoints.hit("reaper.after_reclaim")
        return int(requeued) + int(dead)

    @staticmethod
    def _streams(keys: Keys, queues: list[str]) -> list[tuple[str, int, str]]:
        return [(q, band, keys.stream(q, band)) for q in queues for band in BANDS]

    @staticmethod
    def _known_queues(keys: Keys) -> list[str]:
        """The queues a shard's registry lists (a queue is registered in each shard it uses)."""
        client: Any = shards.client(keys.shard)
        return sorted(client.smembers(keys.queues))

    def settle_dead_consumers(self) -> int:
        """Settle entries read by workers whose heartbeat stopped, then forget those workers."""
        cutoff = time.time() - 2 * dtq_settings.lease_timeout
        dead = self.client.zrangebyscore(self.keys.workers, "-inf", cutoff)
        settled = 0
        for worker_id in dead:
            remaining = 0
            for keys in shards.every():
                client: Any = shards.client(keys.shard)
                for queue, band, stream in self._streams(keys, self._known_queues(keys)):
                    pending = self._pending_of(client, stream, worker_id)
                    remaining += len(pending)
                    if pending:
                        entries = client.xclaim(stream, GROUP, REAPER_CONSUMER, 0, pending)
                        settled += self._reconcile(keys, queue, band, entries)
            if not remaining:
                self._forget_worker(worker_id)
        return settled

    @staticmethod
    def _pending_of(client: Any, stream: str, consumer: str) -> list[str]:
        if not client.exists(stream):
            return []
        try:
            rows = client.xpending_range(stream, GROUP, "-", "+", 100, consumername=consumer)
        except Exception as exc:  # NOGROUP: nothing was ever read from this stream
            if "NOGROUP" in str(exc):
                return []
            raise
        return [row["message_id"] for row in rows]

    def _forget_worker(self, worker_id: str) -> None:
        for keys in shards.every():
            queues = self._known_queues(keys)
            if gateway.forget_consumer(shards.client(keys.shard), keys, queues, worker_id):
                return  # it read entries since we looked: settle them on the next pass
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.keys.workers, worker_id)
        pipe.delete(self.keys.worker(worker_id))
        pipe.execute(raise_on_error=False)
        self.log.info("forgot dead worker worker_id=%s", worker_id)

    def sweep_idle_entries(self) -> int:
        """Backstop: settle entries pending longer than VISIBILITY_TIMEOUT, whoever holds them."""
        return sum(self._sweep_idle(keys) for keys in shards.every())

    def _sweep_idle(self, keys: Keys) -> int:
        idle_ms = int(dtq_settings.VISIBILITY_TIMEOUT * 1000)
        batch = dtq_settings.REAPER_BATCH
        settled = 0
        client = shards.client(keys.shard)
        for queue, band, stream in self._streams(keys, self._known_queues(keys)):
            if not client.exists(stream):
                continue
            cursor = self.cursors.get(stream, "0-0")
            try:
                reply = client.xautoclaim(
                    stream, GROUP, REAPER_CONSUMER, idle_ms, start_id=cursor, count=batch
                )
            except Exception as exc:
                if "NOGROUP" in str(exc):
                    continue
                raise
            # Redis 6.2 replies (cursor, entries); 7.0+ adds a third element: deleted ids.
            self.cursors[stream] = reply[0]
            settled += self._reconcile(keys, queue, band, [e for e in reply[1] if e and e[1]])
        return settled

    def _reconcile(self, keys: Keys, queue: str, band: int, entries: list[Any]) -> int:
        if not entries:
            return 0
        refs, settling = [], []
        for entry_id, fields in entries:
            task_id = (fields or {}).get("t") or "gone"
            # The entry names the task's idempotency key ('i'; none: the task has no key).
            refs.append(layout.TaskRef(task_id, queue, (fields or {}).get("i") or ""))
            settling.append((band, entry_id))
        redelivered, reclaimed, absorbed, _ = gateway.reconcile(
            shards.client(keys.shard), keys, queue, refs, settling, self.use_dlq
        )
        self.log.info(
            "settled pending entries queue=%s redelivered=%s reclaimed=%s absorbed=%s",
            queue,
            redelivered,
            reclaimed,
            absorbed,
        )
        return int(redelivered) + int(reclaimed) + int(absorbed)

    def apply_retention(self) -> None:
        """Drop index entries of terminal tasks past retention, and DLQ entries past theirs."""
        now = time.time()
        cutoff_ms = int((now - dtq_settings.RETENTION) * 1000)
        dlq_cutoff = int((now - dtq_settings.DLQ_RETENTION) * 1000)
        for keys in shards.every():
            queues = self._known_queues(keys)
            pipe = shards.client(keys.shard).pipeline(transaction=False)
            for queue in queues:
                for state in STATE_ORDER:
                    if state in TERMINAL_STATES:
                        pipe.zremrangebyscore(keys.index(queue, state), "-inf", cutoff_ms)
            pipe.delete(keys.legacy_running)  # no longer written: see Keys.legacy_running
            pipe.execute()
            for queue in queues:
                # a script: the DLQ index loses the same entries
                dlq.trim(queue, dlq_cutoff, shard=keys.shard)
        self.forget_unused_queues()

    def forget_unused_queues(self) -> int:
        """Forget, shard by shard, undeclared queues that hold nothing there any more.

        forget_queue.lua sees one shard: a queue is forgotten in each shard where it is empty
        (and registered again by its next submit there).
        """
        return sum(self._forget_unused(keys) for keys in shards.every())

    def _forget_unused(self, keys: Keys) -> int:
        keep = declared()
        candidates = [q for q in self._known_queues(keys) if q not in keep]
        # Take turns, so queues that stay non-empty cannot starve the ones after them.
        after = self.forget_after.get(keys.shard, "")
        later = [q for q in candidates if q > after]
        batch = (later + [q for q in candidates if q <= after])[:FORGET_BATCH]
        self.forget_after[keys.shard] = batch[-1] if len(batch) < len(candidates) else ""
        forgotten = 0
        client = shards.client(keys.shard)
        for queue in batch:
            if gateway.forget_queue(client, keys, queue):
                forgotten += 1
                self.log.info("forgot unused queue queue=%s", queue)
        return forgotten
