"""@dtq.periodic above a django.tasks task on DtqBackend: fired by a scheduler pass, run by a
real worker, and the django TaskContext carries scheduled_at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import dtq
from dtq import schedules
from dtq.compat import default_task_backend
from dtq.engine.connection import get_client
from dtq.engine.errors import InvalidTaskError
from dtq.engine.firing import Firing
from tests.conftest import wait_for
from tests.ops_support import keys
from tests.test_periodic_firing import fired
from tests.testapp import django_tasks as dj


def test_a_django_task_fires_with_its_slot(dtq_env):
    dtq.periodic(every=timedelta(seconds=1), name="dj-beat")(dj.scheduled)
    try:
        (schedule,) = [s for s in schedules.code_schedules() if s.name == "dj-beat"]
        assert schedule.task_name == dj.scheduled.module_path
        f = Firing(keys(), "a")
        f.run_once(get_client(), [schedule])
        wait_for(lambda: f.run_once(get_client(), [schedule]), timeout=3)
    finally:
        schedules.unregister("dj-beat")
    (firing,) = fired("dj-beat")
    dtq_env.worker()
    result = default_task_backend.get_result(firing["task"])
    wait_for(lambda: result.refresh() or result.is_finished, timeout=20)
    slot = datetime.fromtimestamp(firing["slot"] / 1000, UTC)
    assert result.return_value == slot.isoformat()


def test_periodic_refuses_what_is_not_a_task():
    with pytest.raises(InvalidTaskError, match=r"goes above @dtq\.task"):
        dtq.periodic(every=timedelta(seconds=1))(lambda: None)
