"""Periodic schedules for the tests; loaded only by tests that list this module in TASK_MODULES."""

from datetime import timedelta

import dtq
from tests.testapp.tasks import witness


@dtq.periodic(every=timedelta(seconds=1), catch_up="all", name="every-second")
@dtq.task(queue_name="tests", takes_context=True)
def tick(context: dtq.TaskContext) -> str:
    """Witness the slot this firing is for."""
    slot = context.scheduled_at
    assert slot is not None
    witness("tick", context, slot=int(slot.timestamp() * 1000))
    return slot.isoformat()
