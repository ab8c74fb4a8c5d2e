"""dtq_periodic: list, show, next, pause, resume and run-now (audited) on a real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dtq import schedules
from dtq.engine.connection import get_client
from dtq.engine.cron import Timing
from dtq.engine.firing import Firing, Schedule
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import keys
from tests.test_periodic_firing import RECORD, every_second, fired, log_of, redis_ms

pytestmark = pytest.mark.django_db(transaction=True)  # audit rows commit on their own connection


@pytest.fixture
def beat(dtq_env) -> Iterator[Schedule]:
    schedule = every_second()
    schedules.register(schedule)
    yield schedule
    schedules.unregister(schedule.name)


@pytest.fixture
def nightly() -> Iterator[Schedule]:
    schedule = Schedule(
        name="nightly",
        timing=Timing.of("30 2 * * *", None, "Europe/Paris"),
        task_name=RECORD,
    )
    schedules.register(schedule)
    yield schedule
    schedules.unregister(schedule.name)


def run(*args: str) -> str:
    out = StringIO()
    call_command("dtq_periodic", *args, stdout=out)
    return out.getvalue()


def test_list_and_show(beat, nightly):
    Firing(keys(), "a").run_once(get_client(), [beat])
    wait_for(lambda: Firing(keys(), "a").run_once(get_client(), [beat]), timeout=3)
    text = run("list")
    assert "beat" in text and "every 0:00:01" in text and "nightly" in text
    assert "cron 30 2 * * * (Europe/Paris)" in text
    data = json.loads(run("list", "--json"))
    assert [row["name"] for row in data] == ["beat", "nightly"]
    assert data[0]["firings"][0]["task_state"] == "QUEUED"
    shown = run("show", "beat")
    assert f"task {fired()[0]['task']} QUEUED" in shown


def test_next_prints_fire_times_in_the_schedule_zone_rules(nightly):
    lines = run("next", "nightly", "3").split()
    moments = [datetime.fromisoformat(line) for line in lines]
    assert len(moments) == 3
    assert all(m.astimezone(UTC).minute == 30 for m in moments)
    assert moments[1] - moments[0] in (timedelta(hours=23), timedelta(days=1), timedelta(hours=25))


def test_pause_and_resume_are_audited_and_skip_the_paused_slots(beat):
    f = Firing(keys(), "a")
    f.run_once(get_client(), [beat])
    assert run("pause", "beat", "--reason", "maintenance") == "schedule beat: paused\n"
    assert run("pause", "beat") == "schedule beat: already paused\n"
    before = redis_ms()
    wait_for(lambda: redis_ms() > before + 1500, timeout=3)
    assert f.run_once(get_client(), [beat]) == 0
    assert run("resume", "beat") == "schedule beat: resumed\n"
    skipped = log_of()[-1]
    assert (skipped["outcome"], skipped["reason"]) == ("skipped", "paused")
    wait_for(lambda: f.run_once(get_client(), [beat]), timeout=3)
    assert all(row["slot"] > skipped["slot"] for row in fired())
    rows = AuditEntry.objects.order_by("id")
    assert [(r.action, r.outcome, r.affected) for r in rows] == [
        ("periodic_pause", "ok", 1),
        ("periodic_pause", "ok", 0),
        ("periodic_resume", "ok", 1),
    ]
    assert rows[0].parameters == {"schedule": "beat", "source": "code"}
    assert rows[0].reason == "maintenance"


def test_run_now_submits_a_firing_for_now(beat, dtq_env):
    out = run("run-now", "beat", "--reason", "backfill")
    task_id = out.split()[-1]
    task_keys = dtq_env.keys_of(task_id)
    record = dtq_env.client_of(task_keys).hgetall(task_keys.task(task_id))
    assert record["idem"].startswith("dtq.periodic:beat:") and record["idem"].endswith(":now")
    assert fired()[0]["task"] == task_id and fired()[0]["reason"] == "run now"
    row = AuditEntry.objects.get()
    assert (row.action, row.task_id, row.queue, row.affected) == (
        "periodic_run",
        task_id,
        "tests",
        1,
    )


def test_unknown_schedule_is_a_clear_error(beat):
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        run("show", "nope")
