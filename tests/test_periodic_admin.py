"""The schedules pages of the admin (Django's test client, real Redis): what they show, the
audited actions, the add/edit form's validation, and database schedules being fired."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from dtq import schedules
from dtq.engine.connection import get_client
from dtq.engine.firing import Firing, Schedule
from dtq.models import AuditEntry, PeriodicSchedule
from tests.conftest import wait_for
from tests.ops_support import keys
from tests.test_periodic_firing import RECORD, every_second, fired

pytestmark = pytest.mark.django_db(transaction=True)  # audit rows commit on their own connection

LIST = "admin:dtq_periodicschedule_changelist"


@pytest.fixture
def beat(dtq_env) -> Iterator[Schedule]:
    schedule = every_second()
    schedules.register(schedule)
    yield schedule
    schedules.unregister(schedule.name)


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def viewer(db) -> Client:
    user = User.objects.create(username="viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queues"))
    client = Client()
    client.force_login(user)
    return client


def act(client: Client, name: str, action: str, **extra: str):
    return client.post(
        reverse("admin:dtq_periodicschedule_action"), {"name": name, "action": action, **extra}
    )


def add_form(**fields: str) -> dict[str, str]:
    form = {
        "name": "nightly",
        "task": RECORD,
        "args": "[]",
        "kwargs": '{"value": 1}',
        "queue": "",
        "enabled": "on",
        "description": "",
        "cron": "30 2 * * *",
        "every_seconds": "",
        "timezone": "Europe/Paris",
        "catch_up": "latest",
        "catch_up_window_seconds": "86400",
        "overlap": "allow",
    }
    return {**form, **fields}


def test_list_shows_code_schedules_read_only_with_next_fires_and_firings(beat, operator):
    f = Firing(keys(), "a")
    f.run_once(get_client(), [beat])
    wait_for(lambda: f.run_once(get_client(), [beat]), timeout=3)
    page = operator.get(reverse(LIST)).content.decode()
    assert 'data-schedule="beat"' in page and "every 0:00:01" in page
    task_id = fired()[0]["task"]
    assert reverse("admin:dtq_taskqueue_task", args=[task_id]) in page
    assert "QUEUED" in page
    assert "/change/" not in page  # code schedules cannot be edited here
    detail = operator.get(reverse("admin:dtq_periodicschedule_show") + "?name=beat")
    assert detail.status_code == 200 and task_id in detail.content.decode()
    task_page = operator.get(reverse("admin:dtq_taskqueue_task", args=[task_id]))
    assert "Fired by schedule" in task_page.content.decode()


def test_actions_are_audited_and_need_the_change_permission(beat, operator, viewer):
    assert act(viewer, "beat", "pause").status_code == 403
    assert act(operator, "beat", "pause", reason="deploy").status_code == 302
    assert 'value="resume"' in operator.get(reverse(LIST)).content.decode()
    act(operator, "beat", "resume")
    act(operator, "beat", "run")
    rows = AuditEntry.objects.order_by("id")
    assert [(r.action, r.source, r.outcome) for r in rows] == [
        ("periodic_pause", "admin", "ok"),
        ("periodic_resume", "admin", "ok"),
        ("periodic_run", "admin", "ok"),
    ]
    assert rows[2].task_id == fired()[0]["task"]
    assert viewer.get(reverse(LIST)).status_code == 200


def test_add_form_validates_against_the_task_and_is_audited(dtq_env, operator):
    add = reverse("admin:dtq_periodicschedule_add")
    bad_cron = operator.post(add, add_form(cron="61 * * * *")).content.decode()
    assert "invalid cron expression" in bad_cron
    bad_args = operator.post(add, add_form(kwargs='{"nope": 1}')).content.decode()
    assert "arguments do not fit" in bad_args
    unknown = operator.post(add, add_form(task="no.such.task")).content.decode()
    assert "no task named" in unknown
    assert operator.post(add, add_form()).status_code == 302
    row = PeriodicSchedule.objects.get()
    assert row.as_schedule().source == "database"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome) == ("periodic_edit", "ok")
    assert entry.parameters["schedule"] == "nightly" and entry.parameters["change"] == "added"
    page = operator.get(reverse(LIST)).content.decode()
    assert reverse("admin:dtq_periodicschedule_change", args=[row.pk]) in page


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    """Leave no database schedule in the schedulers' cache for later tests of this process."""
    yield
    PeriodicSchedule.objects.all().delete()
    assert schedules.schedules_for_firing(max_age=0) == schedules.code_schedules()


def test_database_schedules_are_fired_and_disabled_ones_are_not(dtq_env, fresh_cache):
    PeriodicSchedule.objects.create(name="db-beat", task=RECORD, every_seconds=1)
    PeriodicSchedule.objects.create(name="off", task=RECORD, every_seconds=1, enabled=False)
    loaded = schedules.schedules_for_firing(max_age=0)
    assert [s.name for s in loaded] == ["db-beat"]
    f = Firing(keys(), "a")
    f.run_once(get_client(), loaded)
    wait_for(lambda: f.run_once(get_client(), loaded), timeout=3)
    assert fired("db-beat")
