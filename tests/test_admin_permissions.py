"""Who may see and do what in the dtq admin: every page and action checks on the server."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

import dtq
from dtq.engine import read_side, workflows
from dtq.models import AuditEntry
from tests.ops_support import dead_letter_by_hand, fail_by_hand
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)

CODENAMES = {
    "view": "view_queues",
    "cancel": "cancel_task",
    "replay": "replay_task",
    "discard": "discard_task",
    "purge": "purge_queue",
    "pause": "pause_queue",
    "submit": "submit_task",
}


def url(name: str, *args: str) -> str:
    return reverse(f"admin:dtq_taskqueue_{name}", args=args)


def client_for(*actions: str, staff: bool = True) -> Client:
    """A client signed in as a staff user holding exactly these dtq permissions."""
    user = User.objects.create(username="u-" + "-".join(actions), is_staff=staff)
    perms = Permission.objects.filter(
        content_type__app_label="dtq", codename__in=[CODENAMES[a] for a in actions]
    )
    user.user_permissions.set(perms)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(dtq_env) -> dict[str, str]:
    """A queued task, a dead-lettered one, and the URLs of every page."""
    queued = tasks.record.enqueue().id
    dead = tasks.poison.using(queue_name="dead").enqueue().id
    assert dead_letter_by_hand(1, "dead") == [dead]
    failed = tasks.record.using(queue_name="other").enqueue().id
    assert fail_by_hand(1, "other") == [failed]
    workflow = dtq.chain(tasks.record.s(1), tasks.record.s()).enqueue().id
    return {"queued": queued, "dead": dead, "failed": failed, "workflow": workflow}


def pages(world: dict[str, str]) -> dict[str, str]:
    """Every read-only page (GET), by short name."""
    return {
        "overview": url("changelist"),
        "overview_live": url("overview_live"),
        "tasks": url("tasks") + "?queue=tests",
        "task": url("task", world["queued"]),
        "task_live": url("task_live", world["queued"]),
        "dlq": url("dlq") + "?queue=dead",
        "workflow": url("workflow", world["workflow"]),
        "workflow_live": url("workflow_live", world["workflow"]),
    }


def actions(world: dict[str, str]) -> dict[str, tuple[str, str, dict]]:
    """Every destructive action: (permission, URL, confirmed POST data)."""
    dlq = {"queue": "dead", "task": [world["dead"]], "confirm": "yes"}
    return {
        "cancel": ("cancel", url("task_cancel", world["queued"]), {}),
        "pause": ("pause", url("queue_pause", "tests"), {}),
        "resume": ("pause", url("queue_resume", "tests"), {}),
        "purge": ("purge", url("queue_purge", "tests"), {"reason": "r"}),
        "replay": ("replay", url("dlq_action"), {**dlq, "action": "replay"}),
        "discard": ("discard", url("dlq_action"), {**dlq, "action": "discard"}),
        "dlq_purge": ("purge", url("dlq_purge"), {"queue": "dead", "reason": "r"}),
        "edit": ("replay", url("task_edit", world["dead"]), {"args": "[]"}),
        "retry": ("replay", url("task_edit", world["failed"]), {"args": "[]"}),
        "run": ("submit", url("run"), {"task": tasks.record.name}),
        "workflow_cancel": ("cancel", url("workflow_cancel", world["workflow"]), {}),
    }


def untouched(world: dict[str, str]) -> bool:
    """True when no action has changed anything."""
    return (
        read_side.get_task(world["queued"])["state"] == "QUEUED"
        and read_side.get_task(world["failed"])["state"] == "FAILED"
        and not read_side.queue_overview("tests")["paused"]
        and read_side.dlq_entries("dead")["total"] == 1
        and workflows.read(world["workflow"]).state == "RUNNING"
        and not AuditEntry.objects.exists()
    )


def test_anonymous_users_are_sent_to_the_login_page(world):
    client = Client()
    for page in pages(world).values():
        response = client.get(page)
        assert response.status_code == 302 and "/login/" in response["Location"], page
    for _, target, data in actions(world).values():
        response = client.post(target, data)
        assert response.status_code == 302 and "/login/" in response["Location"], target
    assert untouched(world)


def test_non_staff_users_with_permissions_are_sent_to_the_login_page(world):
    client = client_for(*CODENAMES, staff=False)
    assert client.get(url("changelist")).status_code == 302
    for _, target, data in actions(world).values():
        assert client.post(target, data).status_code == 302
    assert untouched(world)


def test_staff_without_the_view_permission_get_403_everywhere(world):
    client = client_for()
    index = client.get(reverse("admin:index")).content.decode()
    assert url("changelist") not in index
    for page in pages(world).values():
        assert client.get(page).status_code == 403, page
    for _, target, data in actions(world).values():
        assert client.post(target, data).status_code == 403, target
    assert untouched(world)


def test_view_permission_shows_pages_without_any_button(world):
    client = client_for("view")
    for name, page in pages(world).items():
        assert client.get(page).status_code == 200, name
    html = "".join(client.get(p).content.decode() for p in pages(world).values())
    for hidden in (
        url("queue_pause", "tests"),
        url("queue_purge", "tests"),
        url("task_cancel", world["queued"]),
        url("workflow_cancel", world["workflow"]),
        url("dlq_action"),
        url("dlq_purge"),
        'type="checkbox"',
    ):
        assert hidden not in html, hidden
    assert client.get(url("queue_purge", "tests")).status_code == 403
    assert client.get(url("dlq_purge") + "?queue=dead").status_code == 403
    for _, target, data in actions(world).values():
        assert client.post(target, data).status_code == 403, target
    assert untouched(world)


BUTTONS = {
    "cancel": lambda w: (url("task", w["queued"]), url("task_cancel", w["queued"])),
    "pause": lambda w: (url("changelist"), url("queue_pause", "tests")),
    "purge": lambda w: (url("changelist"), url("queue_purge", "tests")),
    "replay": lambda w: (url("dlq") + "?queue=dead", 'value="replay"'),
    "discard": lambda w: (url("dlq") + "?queue=dead", 'value="discard"'),
}


@pytest.mark.parametrize("action", ["cancel", "pause", "resume", "purge", "replay", "discard"])
def test_each_action_needs_its_own_permission(world, action):
    perm = actions(world)[action][0]
    client = client_for("view", perm)
    page, button = BUTTONS["pause" if action == "resume" else action](world)
    assert button in client.get(page).content.decode()
    for other, (other_perm, target, data) in actions(world).items():
        if other_perm != perm:
            assert client.post(target, data).status_code == 403, other
    assert untouched(world)
    _, target, data = actions(world)[action]
    if action == "resume":
        client.post(actions(world)["pause"][1])
    assert client.post(target, data).status_code == 302
    assert AuditEntry.objects.filter(action=action, outcome="ok").exists()


def test_dlq_purge_needs_the_purge_permission(world):
    _, target, data = actions(world)["dlq_purge"]
    assert client_for("view", "discard").post(target, data).status_code == 403
    client = client_for("view", "purge")
    assert url("dlq_purge") in client.get(url("dlq") + "?queue=dead").content.decode()
    assert client.post(target, data).status_code == 302
    assert read_side.dlq_entries("dead")["total"] == 0


def test_actions_refuse_get(world):
    client = client_for(*CODENAMES)
    for name in ("cancel", "pause", "resume", "workflow_cancel"):
        assert client.get(actions(world)[name][1]).status_code == 405, name
    assert client.get(url("dlq_action")).status_code == 405
    # The purge pages answer GET with the confirmation page, which changes nothing.
    assert client.get(url("queue_purge", "tests")).status_code == 200
    assert untouched(world)


def test_actions_need_a_csrf_token(world):
    user = User.objects.create(username="csrf", is_superuser=True, is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    for _, target, data in actions(world).values():
        assert client.post(target, data).status_code == 403, target
    assert untouched(world)
