"""Chaos periodic schedules: every chaos scheduler fires them while it is killed near fire
times; each firing witnesses its (schedule, slot), so the checker counts doubles and gaps."""

from __future__ import annotations

from datetime import timedelta

import dtq
from tests.chaos.config import PERIODIC, QUEUE
from tests.chaos.tasks import execution


def _fire(context: dtq.TaskContext, schedule: str) -> int:
    slot = context.scheduled_at
    ms = int(slot.timestamp() * 1000) if slot else -1
    with execution(context, "tick", schedule=schedule, slot=ms):
        pass
    return ms


@dtq.periodic(every=timedelta(seconds=PERIODIC["chaos-tick"][1]), name="chaos-tick", catch_up="all")
@dtq.task(name="chaos.tick", queue_name=QUEUE, takes_context=True)
def tick(context: dtq.TaskContext) -> int:
    """Witness one firing of the interval schedule."""
    return _fire(context, "chaos-tick")


@dtq.periodic(
    cron=PERIODIC["chaos-cron"][0],
    timezone=PERIODIC["chaos-cron"][2],
    name="chaos-cron",
    catch_up="all",
)
@dtq.task(name="chaos.cron_tick", queue_name=QUEUE, takes_context=True)
def cron_tick(context: dtq.TaskContext) -> int:
    """Witness one firing of the cron schedule."""
    return _fire(context, "chaos-cron")
