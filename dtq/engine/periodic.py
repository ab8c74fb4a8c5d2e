"""A role that repeats one pass (scheduler, reaper) with liveness and clean stops."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import layout, shards
from dtq.engine.connection import get_client
from dtq.engine.keys import Keys
from dtq.engine.refusals import WriteRefusals

PROCESS_HISTORY = 3600  # seconds a stopped or dead process stays listed


class Periodic:
    """Runs run_once() until stopped; subclasses set `role` and implement run_once()."""

    role = "periodic"

    def __init__(self, process_id: str | None = None) -> None:
        self.process_id = (
            process_id or f"{socket.gethostname()}.{os.getpid()}.{os.urandom(3).hex()}"
        )
        self.keys = shards.keys(shards.HOME)  # process-wide keys: registries, workers
        self.stopped = threading.Event()
        self.log = logging.getLogger(f"dtq.{self.role}")
        self.refusals = WriteRefusals(self.log)

    @property
    def client(self) -> Any:
        """The client of HOME, where process-wide keys live."""
        return get_client()

    def interval(self) -> float:
        """Return how long to wait before the next pass."""
        return self.longest_sleep()

    def longest_sleep(self) -> float:
        """Return the longest wait between two passes (its role's *_INTERVAL setting)."""
        return 1.0

    def run_once(self) -> Any:
        """Do one pass; return something truthy when there may be more work right away."""
        raise NotImplementedError

    def run(self) -> None:
        """Repeat passes until stop(); Redis errors back off and never end the loop."""
        self.log.info("%s started process_id=%s", self.role, self.process_id)
        backoff = 0.1
        while not self.stopped.is_set():
            try:
                self._beat()  # a write: it tells whether Redis accepts writes
                self.refusals.accepted()
                busy = self.run_once()
                backoff = 0.1
            except RedisError as exc:
                self.refusals.report(exc, "running a pass", backoff)
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not busy:
                self.stopped.wait(self.interval())
        self._unregister()
        self.log.info("%s stopped process_id=%s", self.role, self.process_id)

    def _beat(self) -> None:
        # The process key expires by itself when we die (three missed passes of this role);
        # the per-role zset is the index the read side lists (no SCAN), pruned here so it only
        # holds the last hour of processes.
        now = time.time()
        ttl = max(int(3 * self.longest_sleep() + 5), 10)
        registry = self.keys.processes(self.role)
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.process(self.role, self.process_id), now, ex=ttl)
        pipe.zadd(registry, {self.process_id: now})
        pipe.zremrangebyscore(registry, "-inf", now - PROCESS_HISTORY)
        pipe.expire(registry, PROCESS_HISTORY)
        pipe.execute()

    def _unregister(self) -> None:
        """Remove this process from the liveness registry (its key expires if this fails)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self.keys.process(self.role, self.process_id))
        pipe.zrem(self.keys.processes(self.role), self.process_id)
        try:
            pipe.execute()
        except RedisError as exc:
            self.log.warning("could not unregister process_id=%s: %s", self.process_id, exc)

    def stop(self) -> None:
        """Ask the loop to end after the current pass."""
        self.stopped.set()

    def start_thread(self) -> threading.Thread:
        """Run this role on a daemon thread (dtq_worker --with-scheduler/--with-reaper)."""
        thread = threading.Thread(target=self.run, name=f"dtq-{self.role}", daemon=True)
        thread.start()
        return thread

    def due(self, keys: Keys, zset: str, batch: int) -> list[str]:
        """Return up to batch members of a shard's zset scored by time whose time has come."""
        now_ms = int(time.time() * 1000)
        client: Any = shards.client(keys.shard)
        return list(client.zrangebyscore(zset, "-inf", now_ms, start=0, num=batch))

    def task_refs(self, keys: Keys, task_ids: list[str]) -> list[layout.TaskRef]:
        """Look up each task's queue and idempotency key in one round trip.

        Due and expired tasks are known by id only, and a call must declare every key it
        touches (its queue block, its idempotency key): the one pre-read that stays.

        A task whose record is gone gets the default queue: scripts only need some block to
        drop it.
        """
        pipe = shards.client(keys.shard).pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hmget(keys.task(task_id), "queue", "idem")
        return [
            layout.TaskRef(task_id, queue or dtq_settings.DEFAULT_QUEUE, idem or "")
            for task_id, (queue, idem) in zip(task_ids, pipe.execute(), strict=True)
        ]
