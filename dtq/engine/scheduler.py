"""The scheduler: promote delayed and retrying tasks whose time has come, fire schedules."""

from __future__ import annotations

import time
from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import failpoints, gateway, shards
from dtq.engine.firing import Firing
from dtq.engine.keys import Keys
from dtq.engine.periodic import Periodic


class Scheduler(Periodic):
    """Moves due schedule members onto their streams, in every shard; any number may run at once.

    Periodic schedules are fired from HOME's state; each firing is submitted to any shard.
    """

    role = "scheduler"

    def __init__(self, process_id: str | None = None) -> None:
        super().__init__(process_id)
        self.firing = Firing(self.keys, self.process_id)

    def run_once(self) -> int:
        """Promote due tasks and fire due schedules; return non-zero when more may be due."""
        from dtq.schedules import schedules_for_firing

        promoted = self.promote()
        if failpoints.ACTIVE:
            failpoints.hit("scheduler.before_firing")
        self.firing.run_once(self.client, schedules_for_firing())
        return promoted

    def promote(self) -> int:
        """Promote up to SCHEDULER_BATCH due tasks per shard; return how many were handled."""
        return sum(self._promote(keys) for keys in shards.every())

    def _promote(self, keys: Keys) -> int:
        batch = dtq_settings.SCHEDULER_BATCH
        due = self.due(keys, keys.schedule, batch)
        if not due:
            return 0
        refs = self.task_refs(keys, due)
        promoted, expired, dropped = gateway.promote(shards.client(keys.shard), keys, refs)
        if failpoints.ACTIVE:
            failpoints.hit("scheduler.after_promote")
        self.log.debug("promoted=%s expired=%s dropped=%s", promoted, expired, dropped)
        return len(due) if len(due) == batch else 0

    def longest_sleep(self) -> float:
        """Return SCHEDULER_INTERVAL: the scheduler never sleeps longer between passes."""
        return dtq_settings.SCHEDULER_INTERVAL

    def interval(self) -> float:
        """Sleep until the next member or slot is due, but never longer than SCHEDULER_INTERVAL."""
        limit = self.longest_sleep()
        slot = self.firing.seconds_to_next()
        if slot is not None:
            limit = min(limit, max(slot, 0.005))
        heads: list[float] = []
        for keys in shards.every():
            client: Any = shards.client(keys.shard)
            head = client.zrange(keys.schedule, 0, 0, withscores=True)
            heads.extend(score for _, score in head)
        if not heads:
            return limit
        return min(max(min(heads) / 1000 - time.time(), 0.005), limit)
