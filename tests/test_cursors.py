"""Cursors and ids from clients: ASCII digits in range, else a 400 that says what was wrong."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dtq.engine import cursors
from tests.ops_support import dead_letter_by_hand
from tests.test_api_support import api, assert_error  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

TASK_ID = "0" * 22
BAD_ENTRY_IDS = [
    "\u0661\u0662-\u0663",  # Arabic-Indic digits: str.isdigit() says yes
    "\u00b2-0",  # superscript two
    "18446744073709551616-0",  # 2**64: Redis refuses it
    "1-18446744073709551616",
    "1-",
    "-1",
    "",
]
BAD_AUDIT_CURSORS = ["\u00b2", "\u0661", "0", "-1", "9223372036854775808", "1.5"]
BAD_TASK_CURSORS = [
    f"\u00b2:{TASK_ID}",
    f"18446744073709551616:{TASK_ID}",
    "1:nope",
]


@pytest.mark.parametrize("value", BAD_ENTRY_IDS)
def test_entry_ids_are_checked(value):
    with pytest.raises(ValueError, match="entry id"):
        cursors.entry_id(value)


def test_a_trailing_newline_is_refused():  # the API trims it first; the engine refuses it
    for check, value in [
        (cursors.entry_id, "1-2\n"),
        (cursors.audit_cursor, "1\n"),
        (cursors.task_cursor, f"1:{TASK_ID}\n"),
    ]:
        with pytest.raises(ValueError):
            check(value)


def test_good_values_pass():
    assert cursors.entry_id("18446744073709551615-18446744073709551615")
    assert cursors.audit_cursor("9223372036854775807") == 2**63 - 1
    assert cursors.task_cursor(f"17:{TASK_ID}") == (17, TASK_ID)


@pytest.mark.parametrize("value", BAD_ENTRY_IDS[:-1])
def test_a_bad_dlq_cursor_is_a_400(dtq_env, api, value):  # noqa: F811
    tasks.record.enqueue()
    dead_letter_by_hand(1)
    client = api.client("view")
    for query in ({"cursor": value}, {"cursor": value, "queue": "tests"}):
        error = assert_error(client.get("/api/dlq/", query), 400, "invalid_cursor")
        assert "entry id" in error["message"]


@pytest.mark.parametrize("value", BAD_AUDIT_CURSORS)
def test_a_bad_audit_cursor_is_a_400(dtq_env, api, value):  # noqa: F811
    client = api.client("audit")
    error = assert_error(client.get("/api/audit/", {"cursor": value}), 400, "invalid_cursor")
    assert "cursor" in error["message"]


@pytest.mark.parametrize("value", BAD_TASK_CURSORS)
def test_a_bad_task_cursor_is_a_400(dtq_env, api, value):  # noqa: F811
    tasks.record.enqueue()
    client = api.client("view")
    for query in ({"cursor": value}, {"cursor": value, "queue": "tests"}):
        assert_error(client.get("/api/tasks/", query), 400, "invalid_cursor")


def test_bad_cursors_in_the_admin_are_a_400(dtq_env, admin_client):
    tasks.record.enqueue()
    dead_letter_by_hand(1)
    dlq = reverse("admin:dtq_taskqueue_dlq")
    tasks_page = reverse("admin:dtq_taskqueue_tasks")
    for value in BAD_ENTRY_IDS[:3]:
        assert admin_client.get(dlq, {"queue": "tests", "before": value}).status_code == 400
    for value in BAD_TASK_CURSORS:
        assert admin_client.get(tasks_page, {"queue": "tests", "cursor": value}).status_code == 400
