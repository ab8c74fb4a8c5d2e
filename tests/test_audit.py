"""Audit rows: committed whatever the caller's transaction does, never understating the work."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from redis.exceptions import ConnectionError as RedisConnectionError

from dtq.engine import ops, read_side
from dtq.engine.audit import Actor
from dtq.engine.connection import get_client
from dtq.engine.connection import reset as reset_redis
from dtq.engine.errors import AuditUnavailable, InvalidOperation
from dtq.models import AuditEntry
from tests.ops_support import ACTOR, claim_by_hand, dead_letter_by_hand, finalize_by_hand
from tests.test_api_support import api, assert_error, post  # noqa: F401
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def rows_seen_elsewhere() -> list[tuple[str, str, int]]:
    """Return (action, outcome, affected) of every audit row, as a new connection sees them."""
    seen: list[tuple[str, str, int]] = []

    def read() -> None:
        seen.extend(AuditEntry.objects.values_list("action", "outcome", "affected"))
        connection.close()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    return seen


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def cut_redis() -> Iterator[Any]:
    """A function that points dtq's Redis pool at a closed port: later commands fail."""
    pool = get_client().connection_pool
    port = pool.connection_kwargs["port"]

    def cut() -> None:
        pool.connection_kwargs["port"] = free_port()
        pool.disconnect()
        pool.reset()  # the next connections are made with the closed port

    yield cut
    pool.connection_kwargs["port"] = port
    reset_redis()


@pytest.fixture
def audit_table_gone() -> Iterator[Any]:
    """A function that renames the audit table away (writes to it fail), renamed back after."""
    moved = []

    def move() -> None:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE dtq_auditentry RENAME TO dtq_auditentry_away")
        moved.append(True)

    yield move
    if moved:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE dtq_auditentry_away RENAME TO dtq_auditentry")


def finished_task() -> str:
    task_id = tasks.record.enqueue().id
    [claimed] = claim_by_hand("tests", 1)
    finalize_by_hand(claimed, "success", data=1)
    return task_id


# ----- rows survive the caller's transaction ------------------------------------------------


def test_a_refused_cancel_under_atomic_requests_keeps_its_row(dtq_env, api, monkeypatch):  # noqa: F811
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    task_id = finished_task()
    response = post(api.client("cancel"), f"/api/tasks/{task_id}/cancel/", {"reason": "x"})
    assert_error(response, 409, "task_finished")
    entry = AuditEntry.objects.get(action="cancel")
    assert (entry.task_id, entry.outcome) == (task_id, "refused")


def test_a_row_survives_the_rollback_of_the_callers_transaction(dtq_env):
    with pytest.raises(RuntimeError), transaction.atomic():
        assert ops.pause_queue("tests", actor=ACTOR, reason="maintenance")
        raise RuntimeError("the caller's own work failed")
    entry = AuditEntry.objects.get(action="pause")
    assert (entry.outcome, entry.affected) == ("ok", 1)


def test_a_purge_that_loses_redis_after_one_batch_keeps_its_row_and_real_count(dtq_env, cut_redis):
    for i in range(450):  # three batches of at most 200
        tasks.record.enqueue(i)
    seen: list[list[tuple[str, str, int]]] = []

    def after_batch(result: Any) -> None:
        if not seen:
            seen.append(rows_seen_elsewhere())
            cut_redis()

    with pytest.raises(RedisConnectionError), transaction.atomic():
        ops.purge_queue("tests", actor=ACTOR, reason="bad deploy", progress=after_batch)
    assert seen == [[("purge", "started", 200)]]  # committed, and counted batch by batch
    entry = AuditEntry.objects.get(action="purge")
    assert (entry.outcome, entry.affected, entry.parameters["queued"]) == ("error", 200, 200)
    assert "ConnectionError" in entry.detail


def test_a_dlq_purge_that_loses_redis_counts_the_batches_done(dtq_env, cut_redis):
    for i in range(150):
        tasks.record.enqueue(i)
    dead_letter_by_hand(150)
    assert read_side.dlq_entries("tests", 1)["total"] == 150
    with pytest.raises(RedisConnectionError):
        ops.purge_dlq("tests", actor=ACTOR, reason="old", progress=lambda result: cut_redis())
    entry = AuditEntry.objects.get(action="dlq_purge")
    assert (entry.outcome, entry.affected) == ("error", 100)  # one batch of 100 was done


def test_a_row_that_cannot_be_written_stops_the_action_before_redis(dtq_env, audit_table_gone):
    audit_table_gone()
    with pytest.raises(AuditUnavailable):
        ops.pause_queue("tests", actor=ACTOR)
    assert read_side.queue_overview("tests")["paused"] is False


def test_a_closing_update_that_fails_still_reports_the_work_done(dtq_env, audit_table_gone, caplog):
    for i in range(5):
        tasks.record.enqueue(i)
    with caplog.at_level(logging.ERROR, logger="dtq.audit"):
        result = ops.purge_queue(
            "tests", actor=ACTOR, reason="r", progress=lambda result: audit_table_gone()
        )
    assert result.purged == 5  # the caller hears what was done, not an error
    assert "audit row not closed" in caplog.text


def test_a_configured_audit_database_inside_a_transaction_is_refused(dtq_env):
    dtq_env.configure(AUDIT_DATABASE="default")
    with pytest.raises(AuditUnavailable, match="inside a transaction"), transaction.atomic():
        ops.pause_queue("tests", actor=ACTOR)
    assert read_side.queue_overview("tests")["paused"] is False
    assert ops.pause_queue("tests", actor=ACTOR)  # outside a transaction it is used
    assert AuditEntry.objects.get(action="pause").outcome == "ok"


def test_an_unwritable_row_is_a_503_in_the_api(dtq_env, api, audit_table_gone):  # noqa: F811
    client = api.client("pause")
    audit_table_gone()
    response = post(client, "/api/queues/tests/pause/", {"reason": "x"})
    assert_error(response, 503, "audit_unavailable")


# ----- validated values -------------------------------------------------------------------


def test_a_malformed_request_id_is_refused_by_the_actor():
    with pytest.raises(ValueError, match="request id"):
        Actor(name="x", source="api", request_id="abc\ninjected")


@pytest.fixture
def operator(db) -> Any:
    """An admin client signed in as a superuser."""
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


def admin_cancel_url(task_id: str) -> str:
    from django.urls import reverse

    return reverse("admin:dtq_taskqueue_task_cancel", args=["X"]).replace("/X/", f"/{task_id}/")


@pytest.mark.parametrize(
    "task_id",  # the URL's %0A reaches the view as a newline
    ["0" * 22 + "%0Aaudit id=1 actor=admin action=purge", "a" * 200, "\uff10" * 22],
)
def test_a_malformed_task_id_in_the_admin_cancel_url_is_refused(dtq_env, operator, caplog, task_id):
    with caplog.at_level(logging.INFO, logger="dtq.audit"):
        response = operator.post(admin_cancel_url(task_id), {"reason": "x"}, follow=True)
    assert response.status_code in (200, 404)
    if response.status_code == 200:
        assert "invalid task id" in response.content.decode()
    assert AuditEntry.objects.count() == 0
    assert [r for r in caplog.records if r.name == "dtq.audit"] == []  # no line to forge


def test_request_ids_are_stored_only_when_well_formed(dtq_env, api, operator):  # noqa: F811
    client = api.client("pause")
    post(client, "/api/queues/tests/pause/", {"reason": "x"}, HTTP_X_REQUEST_ID="req-1")
    post(client, "/api/queues/tests/resume/", {"reason": "x"}, HTTP_X_REQUEST_ID="bad\nid")
    from django.urls import reverse

    operator.post(
        reverse("admin:dtq_taskqueue_queue_pause", args=["tests"]), HTTP_X_REQUEST_ID="é" * 200
    )
    rows = list(AuditEntry.objects.order_by("id").values_list("action", "request_id"))
    assert rows[0] == ("pause", "req-1")
    assert [r[1] for r in rows[1:]] and all(len(r[1]) == 32 and r[1].isalnum() for r in rows[1:])


def test_a_nul_character_in_a_reason_is_refused_before_the_row(dtq_env, operator):
    task_id = tasks.record.enqueue().id
    response = operator.post(admin_cancel_url(task_id), {"reason": "a\x00b"}, follow=True)
    assert "NUL characters" in response.content.decode()
    assert AuditEntry.objects.count() == 0 and read_side.get_task(task_id)["state"] == "QUEUED"


def test_per_id_actions_of_one_admin_request_share_one_audit_connection(dtq_env, admin_client):
    from django.db.backends.signals import connection_created
    from django.urls import reverse

    for i in range(3):
        tasks.record.enqueue(i)
    dead = dead_letter_by_hand(3)
    opened: list[str] = []

    def count(sender: Any, connection: Any, **kwargs: Any) -> None:
        opened.append(connection.alias)

    connection_created.connect(count)
    try:
        data = {"action": "discard", "queue": "tests", "confirm": "yes", "task": dead}
        admin_client.post(reverse("admin:dtq_taskqueue_dlq_action"), data)
    finally:
        connection_created.disconnect(count)
    rows = AuditEntry.objects.filter(action="discard", outcome="ok")
    assert sorted(rows.values_list("task_id", flat=True)) == sorted(dead)
    assert opened.count("dtq_audit") == 1  # not one per id (six connects for three ids)


def test_a_refused_action_on_an_invalid_queue_name_fits_its_row_and_one_log_line(dtq_env, caplog):
    name = "x" * 200 + "\naudit id=1 actor=admin action=purge"
    with caplog.at_level(logging.INFO, logger="dtq.audit"), pytest.raises(InvalidOperation):
        ops.pause_queue(name, actor=ACTOR)
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.queue) == ("refused", "x" * 64)
    [line] = [r.getMessage() for r in caplog.records if r.name == "dtq.audit"]
    assert "\n" not in line


def test_action_names_have_one_source():
    from dtq.engine.actions import CHOICES, AuditAction

    assert AuditEntry._meta.get_field("action").choices == CHOICES
    assert [value for value, _ in CHOICES] == [a.value for a in AuditAction]
    assert all(len(a.value) <= AuditEntry._meta.get_field("action").max_length for a in AuditAction)


def test_an_action_outside_the_list_is_refused_before_its_row(dtq_env):
    from dtq.engine.audit import audited

    with pytest.raises(ValueError, match="explode"), audited(ACTOR, "explode"):  # type: ignore[arg-type]
        pass
    assert rows_seen_elsewhere() == []
