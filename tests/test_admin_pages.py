"""The dtq admin pages with Django's test client, on a real Redis: what they show and do."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dtq.engine import events, read_side
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import claim_by_hand, dead_letter_by_hand, fail_by_hand, finalize_by_hand
from tests.testapp import tasks

# Audit rows are committed on a connection of their own, outside the test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def url(name: str, *args: str) -> str:
    return reverse(f"admin:dtq_taskqueue_{name}", args=args)


@pytest.fixture
def operator(db) -> Client:
    """A client signed in as a superuser (every dtq permission)."""
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)  # no password hashing: keeps each test fast
    return client


def text(response) -> str:
    return response.content.decode()


def test_admin_index_links_the_dashboard_and_the_audit_log(dtq_env, operator):
    page = text(operator.get(reverse("admin:index")))
    assert url("changelist") in page
    assert reverse("admin:dtq_auditentry_changelist") in page


def test_overview_shows_queues_workers_roles_and_a_chart(dtq_env, operator):
    tasks.record.enqueue(1)
    tasks.record.enqueue(2)
    tasks.record.using(run_after=timedelta(minutes=5)).enqueue(3)
    tasks.record.using(queue_name="other").enqueue(4)
    response = operator.get(url("changelist"))
    assert response.status_code == 200
    page = text(response)
    assert response.templates[0].name == "dtq/overview.html"
    assert "admin/base_site.html" in [t.name for t in response.templates]
    row = re.search(r'<tr data-queue="tests">.*?</tr>', page, re.S).group(0)
    assert re.search(r'data-field="queued">2<', row)
    assert re.search(r'data-field="scheduled">1<', row)
    assert re.search(r'data-field="running">0<', row)
    assert '<tr data-queue="other">' in page
    assert '<svg class="dtq-chart"' in page
    assert "scheduler" in page and "reaper" in page and "No worker is registered" in page
    assert 'data-last-id="' in page and "dtq/live.js" in page


def test_overview_counts_throughput_and_failure_rate(dtq_env, operator):
    for _ in range(3):
        tasks.record.enqueue()
    tasks.poison.enqueue()
    claimed = claim_by_hand("tests", 4)
    for c in claimed[:3]:
        finalize_by_hand(c, "success", data=1)
    finalize_by_hand(claimed[3], "fail")
    context = operator.get(url("changelist")).context
    assert context["summary"]["succeeded"] == 3
    assert context["summary"]["failed"] == 1
    assert context["summary"]["failure_rate"] == pytest.approx(0.25)
    assert context["totals"]["dlq"] == 1
    assert "25 %" in text(operator.get(url("overview_live")))


def test_overview_lists_a_live_worker_and_its_heartbeat(dtq_env, operator):
    tasks.hold.enqueue(30)
    dtq_env.worker("--worker-id", "admin-w1")
    wait_for(lambda: read_side.queue_overview("tests")["running"] == 1)
    page = text(operator.get(url("changelist")))
    assert "admin-w1" in page
    assert re.search(r'data-field="running">1<', page)
    assert "Heartbeat age" in page


def test_overview_live_fragment_is_only_the_refreshable_part(dtq_env, operator):
    tasks.record.enqueue()
    response = operator.get(url("overview_live"))
    assert response.status_code == 200
    page = text(response)
    assert '<tr data-queue="tests">' in page
    assert "<html" not in page


def test_task_list_filters_by_state_and_pages_with_a_cursor(dtq_env, operator):
    ids = [tasks.record.enqueue(i).id for i in range(7)]
    tasks.record.using(run_after=timedelta(minutes=5)).enqueue()
    response = operator.get(url("tasks"), {"queue": "tests", "state": "QUEUED"})
    listed = [t["id"] for t in response.context["tasks"]]
    assert sorted(listed) == sorted(ids)  # newest first; ties within a millisecond by id
    from dtq.views import tasks as task_views

    task_views.PAGE = 3
    try:
        first = operator.get(url("tasks"), {"queue": "tests", "state": "QUEUED"})
        assert len(first.context["tasks"]) == 3
        next_url = first.context["next_url"]
        second = operator.get(url("tasks") + next_url)
        assert [t["id"] for t in first.context["tasks"]] == listed[:3]
        assert [t["id"] for t in second.context["tasks"]] == listed[3:6]
        assert 'rel="next"' in text(second)
    finally:
        task_views.PAGE = 50


def test_task_list_filters_by_task_name(dtq_env, operator):
    tasks.record.enqueue()
    wanted = tasks.flaky.enqueue(0).id
    response = operator.get(url("tasks"), {"queue": "tests", "task": tasks.flaky.name})
    assert [t["id"] for t in response.context["tasks"]] == [wanted]


def test_search_by_id_opens_the_task_or_says_none(dtq_env, operator):
    task_id = tasks.record.enqueue().id
    response = operator.get(url("tasks"), {"q": task_id})
    assert response.status_code == 302 and response["Location"] == url("task", task_id)
    missing = operator.get(url("tasks"), {"q": "01zzzzzzzz00zzzzzzzzzz"}, follow=True)
    assert "No task with id" in text(missing)


def test_search_by_argument_value_over_every_queue_is_a_shareable_url(dtq_env, operator):
    tasks.record.enqueue({"user_id": 41})
    wanted = tasks.record.using(queue_name="other").enqueue({"user_id": 42}).id
    response = operator.get(url("tasks"), {"q": "args.0.user_id=42"})
    assert [t["id"] for t in response.context["tasks"]] == [wanted]
    assert 'value="args.0.user_id=42"' in text(response)
    assert "Read 2 task records" in text(response)
    narrowed = operator.get(url("tasks"), {"q": "args.0.user_id=42", "queue": "tests"})
    assert narrowed.context["tasks"] == []


def test_a_search_that_does_not_parse_says_why(dtq_env, operator):
    response = operator.get(url("tasks"), {"q": "state:DONE"})
    assert response.status_code == 200
    assert "Search not understood" in text(response) and "no state" in text(response)


def test_task_page_shows_arguments_result_attempts_and_timeline(dtq_env, operator):
    result = tasks.flaky.enqueue(1)
    dtq_env.worker("--with-scheduler")
    wait_for(lambda: result.refresh() or result.state == "SUCCEEDED")
    response = operator.get(url("task", result.id))
    page = text(response)
    assert response.status_code == 200
    assert "SUCCEEDED" in page and response.context["args"] == "[\n  1\n]"
    assert 'id="dtq-result">2<' in page  # the attempt it succeeded on
    assert "RetryableError" in page and "Traceback" in page
    labels = [m["label"] for m in response.context["timeline"]]
    assert labels[0].startswith("submitted")
    assert "attempt 1 retry" in labels and "attempt 2 succeeded" in labels
    assert 'id="dtq-cancel"' not in page  # finished: nothing to cancel


def test_unknown_task_is_404(dtq_env, operator):
    assert operator.get(url("task", "0" * 22)).status_code == 404


def test_cancel_button_cancels_and_audits(dtq_env, operator):
    task_id = tasks.record.enqueue().id
    page = text(operator.get(url("task", task_id)))
    assert 'id="dtq-cancel"' in page
    response = operator.post(url("task_cancel", task_id), {"reason": "not needed"}, follow=True)
    assert "Task cancelled." in text(response)
    assert read_side.get_task(task_id)["state"] == "CANCELLED"
    entry = AuditEntry.objects.get(action="cancel")
    assert (entry.task_id, entry.actor_name, entry.source, entry.reason, entry.outcome) == (
        task_id,
        "root",
        "admin",
        "not needed",
        "ok",
    )


def test_cancelling_a_finished_task_reports_the_refusal(dtq_env, operator):
    task_id = tasks.record.enqueue().id
    [claimed] = claim_by_hand("tests", 1)
    finalize_by_hand(claimed, "success", data=1)
    response = operator.post(url("task_cancel", task_id), follow=True)
    assert "Not cancelled" in text(response)
    assert AuditEntry.objects.get(action="cancel").outcome == "refused"


def test_pause_and_resume_buttons(dtq_env, operator):
    tasks.record.enqueue()
    page = text(operator.get(url("changelist")))
    assert url("queue_pause", "tests") in page
    operator.post(url("queue_pause", "tests"))
    assert read_side.queue_overview("tests")["paused"] is True
    page = text(operator.get(url("changelist")))
    assert url("queue_resume", "tests") in page and "paused" in page
    operator.post(url("queue_resume", "tests"))
    assert read_side.queue_overview("tests")["paused"] is False
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "pause",
        "resume",
    ]


def test_purge_goes_through_a_confirmation_page_with_counts_and_a_reason(dtq_env, operator):
    for _ in range(4):
        tasks.record.enqueue()
    tasks.record.using(run_after=timedelta(minutes=5)).enqueue()
    page = text(operator.get(url("queue_purge", "tests")))
    assert re.search(r'data-field="queued">4<', page)
    assert re.search(r'data-field="scheduled">1<', page)
    assert "reason" in page.lower()
    refused = operator.post(url("queue_purge", "tests"), {"reason": "  "})
    assert "A reason is required." in text(refused)
    assert read_side.queue_overview("tests")["queued"] == 4
    assert not AuditEntry.objects.exists()
    done = operator.post(url("queue_purge", "tests"), {"reason": "load test junk"}, follow=True)
    assert "4 queued and 1 scheduled" in text(done)
    assert read_side.queue_overview("tests")["queued"] == 0
    entry = AuditEntry.objects.get(action="purge")
    assert (entry.queue, entry.affected, entry.reason) == ("tests", 5, "load test junk")


def dead_lettered(n: int, queue: str = "tests") -> list[str]:
    for _ in range(n):
        tasks.poison.using(queue_name=queue).enqueue()
    return dead_letter_by_hand(n, queue)


def test_dlq_lists_entries_and_filters_by_error_and_name(dtq_env, operator):
    ids = dead_lettered(3)
    response = operator.get(url("dlq"), {"queue": "tests"})
    assert sorted(e["task_id"] for e in response.context["entries"]) == sorted(ids)
    assert "3 entries" in text(response)
    assert operator.get(url("dlq"), {"queue": "tests", "error": "ValueError"}).context["entries"]
    assert not operator.get(url("dlq"), {"queue": "tests", "error": "KeyError"}).context["entries"]
    assert not operator.get(url("dlq"), {"queue": "tests", "name": "x.y"}).context["entries"]


def test_dlq_replay_of_selected_entries_needs_confirmation(dtq_env, operator):
    ids = dead_lettered(3)
    form = {"action": "replay", "queue": "tests", "task": ids[:2], "scope": "selected"}
    confirm = operator.post(url("dlq_action"), form)
    assert confirm.templates[0].name == "dtq/dlq_confirm.html"
    assert read_side.dlq_entries("tests")["total"] == 3  # nothing happened yet
    done = operator.post(url("dlq_action"), {**form, "confirm": "yes"}, follow=True)
    assert "Replay: 2 of 2 selected entries." in text(done)
    assert read_side.dlq_entries("tests")["total"] == 1
    assert {read_side.get_task(i)["state"] for i in ids[:2]} == {"QUEUED"}
    assert AuditEntry.objects.filter(action="replay", outcome="ok").count() == 2


def test_dlq_replay_to_another_queue(dtq_env, operator):
    [task_id] = dead_lettered(1)
    form = {"action": "replay", "queue": "tests", "task": [task_id], "to_queue": "other"}
    operator.post(url("dlq_action"), {**form, "confirm": "yes"})
    record = read_side.get_task(task_id)
    assert (record["queue"], record["state"]) == ("other", "QUEUED")


def test_dlq_replay_to_an_invalid_queue_name_is_refused(dtq_env, operator):
    [task_id] = dead_lettered(1)
    form = {"action": "replay", "queue": "tests", "task": [task_id], "to_queue": "no:pe"}
    response = operator.post(url("dlq_action"), {**form, "confirm": "yes"}, follow=True)
    assert "Replay to queue: use" in text(response)
    assert read_side.get_task(task_id)["state"] == "DEAD_LETTERED"
    assert not AuditEntry.objects.exists()


def test_dlq_discard_every_matching_entry(dtq_env, operator):
    dead_lettered(3)
    form = {"action": "discard", "queue": "tests", "scope": "matching", "error": "ValueError"}
    page = text(operator.post(url("dlq_action"), form))
    assert "every entry" in page
    done = operator.post(url("dlq_action"), {**form, "confirm": "yes"}, follow=True)
    assert "Discard: 3 entries" in text(done)
    assert read_side.dlq_entries("tests")["total"] == 0
    entry = AuditEntry.objects.get(action="discard")
    assert entry.affected == 3  # the admin bounds each request (BULK_REQUEST_LIMIT):
    assert entry.parameters["filter"] == {"error": "ValueError", "limit": 2000}


def test_dlq_action_without_selection_goes_back(dtq_env, operator):
    dead_lettered(1)
    response = operator.post(url("dlq_action"), {"action": "replay", "queue": "tests"}, follow=True)
    assert "Select entries first" in text(response)


def test_dlq_purge_needs_a_reason(dtq_env, operator):
    dead_lettered(2)
    page = text(operator.get(url("dlq_purge"), {"queue": "tests"}))
    assert 'id="dtq-purge-total">2<' in page
    assert "A reason is required." in text(operator.post(url("dlq_purge"), {"queue": "tests"}))
    operator.post(url("dlq_purge"), {"queue": "tests", "reason": "old junk"})
    assert read_side.dlq_entries("tests")["total"] == 0
    assert AuditEntry.objects.get(action="dlq_purge").affected == 2


def test_audit_log_is_read_only(dtq_env, operator):
    tasks.record.enqueue()
    operator.post(url("queue_pause", "tests"), {"reason": "maintenance"})
    entry = AuditEntry.objects.get()
    listing = text(operator.get(reverse("admin:dtq_auditentry_changelist")))
    assert "maintenance" in listing and "pause" in listing
    change = operator.get(reverse("admin:dtq_auditentry_change", args=[entry.pk]))
    assert change.status_code == 200 and 'name="reason"' not in text(change)
    assert operator.get(reverse("admin:dtq_auditentry_add")).status_code == 403
    delete = operator.post(reverse("admin:dtq_auditentry_delete", args=[entry.pk]))
    assert delete.status_code == 403 and AuditEntry.objects.count() == 1


def test_pages_embed_the_newest_event_id_for_the_live_feed(dtq_env, operator):
    tasks.record.enqueue()
    newest = events.latest_id()
    assert newest != events.ORIGIN
    assert f'data-last-id="{newest}"' in text(operator.get(url("tasks")))


def commands_for(client: Client, path: str, redis_client) -> int:
    """Return how many commands Redis processed while the page was rendered."""
    before = redis_client.info("stats")["total_commands_processed"]
    assert client.get(path).status_code == 200
    return redis_client.info("stats")["total_commands_processed"] - before - 1  # our INFO


def submit(n: int, queue: str = "tests") -> None:
    from dtq.engine.submit import Submission, submit_many

    for start in range(0, n, 500):
        batch = [
            Submission(name=tasks.record.name, queue=queue, args=[i])
            for i in range(start, min(start + 500, n))
        ]
        submit_many(batch)


def test_page_cost_does_not_grow_with_the_number_of_tasks(dtq_env, private_redis, operator):
    """No page scans: the Redis commands per view are the same for 500 and 3,000 tasks."""
    dead_lettered(3)
    pages = [
        url("changelist"),
        url("overview_live"),
        url("tasks") + "?queue=tests",
        url("tasks") + "?queue=tests&state=QUEUED",
        url("dlq") + "?queue=tests",
        url("queue_purge", "tests"),
    ]
    submit(500)
    # Warm up: scripts run on a thread's own connection, so the first page may open the pool's
    # first connection (HELLO, CLIENT SETINFO): a one-off, not a per-page cost.
    for page in pages:
        commands_for(operator, page, dtq_env.client)
    small = {page: commands_for(operator, page, dtq_env.client) for page in pages}
    submit(2500)
    large = {page: commands_for(operator, page, dtq_env.client) for page in pages}
    assert large == small
    assert max(small.values()) < 200, small


def test_task_list_and_page_show_progress_and_durations(dtq_env, operator):
    from dtq.engine import progress

    task_id = tasks.record.enqueue().id
    [claimed] = claim_by_hand("tests", 1)
    assert progress.store(task_id, "tests", claimed["attempt"], 0.4, "copying files") == 1
    listing = text(operator.get(url("tasks"), {"q": "state:RUNNING"}))
    assert 'value="0.400"' in listing and "40% · copying files" in listing
    page = text(operator.get(url("task", task_id)))
    assert "40% · copying files" in page and "so far" in page


def test_run_a_task_from_the_form(dtq_env, operator):
    page = operator.get(url("run"))
    assert page.status_code == 200 and "tests.testapp.tasks.flaky(failures: int)" in text(page)
    bad = operator.post(url("run"), {"task": tasks.flaky.name, "args": "[1, 2]"}, follow=True)
    assert "Not started" in text(bad) and "too many positional" in text(bad)
    notjson = operator.post(url("run"), {"task": tasks.flaky.name, "args": "[1,"}, follow=True)
    assert "args is not valid JSON" in text(notjson)
    ok = operator.post(url("run"), {"task": tasks.flaky.name, "kwargs": '{"failures": 0}'})
    assert ok.status_code == 302
    task_id = ok["Location"].rstrip("/").split("/")[-1]
    assert read_side.get_task(task_id)["payload"]["kwargs"] == {"failures": 0}
    assert AuditEntry.objects.get(outcome="ok").action == "submit"


def test_edit_a_dead_lettered_task_and_replay_it(dtq_env, operator):
    task_id = tasks.record.enqueue(1).id
    dead_letter_by_hand(1)
    assert url("task_edit", task_id) in text(operator.get(url("task", task_id)))
    form = operator.get(url("task_edit", task_id))
    assert "[1]" in text(form)
    bad = operator.post(url("task_edit", task_id), {"args": "[1, 2]"}, follow=True)
    assert "Not replayed" in text(bad)
    ok = operator.post(url("task_edit", task_id), {"args": "[9]", "priority": "50"})
    assert ok.status_code == 302
    record = read_side.get_task(task_id)
    assert record["state"] == "QUEUED" and record["payload"]["args"] == [9]
    assert record["priority"] == 50
    row = AuditEntry.objects.get(outcome="ok")
    assert row.parameters["edit"]["before"]["args"] == [1]
    assert row.parameters["edit"]["after"]["args"] == [9]
    assert operator.get(url("task_edit", task_id)).status_code == 404  # no longer dead


def test_edit_a_failed_task_and_retry_it(dtq_env, operator):
    task_id = tasks.record.enqueue(1).id
    assert fail_by_hand(1) == [task_id]  # FAILED: no DLQ entry
    page = text(operator.get(url("task", task_id)))
    assert 'id="dtq-retry-link"' in page and url("task_edit", task_id) in page
    form = text(operator.get(url("task_edit", task_id)))
    assert "[1]" in form and "Retry with these values" in form
    bad = operator.post(url("task_edit", task_id), {"args": "[1, 2]"}, follow=True)
    assert "Not retried" in text(bad) and read_side.get_task(task_id)["state"] == "FAILED"
    ok = operator.post(url("task_edit", task_id), {"args": "[9]", "priority": "50"}, follow=True)
    assert "Edited and retried (retried)." in text(ok)
    record = read_side.get_task(task_id)
    assert record["state"] == "QUEUED" and record["payload"]["args"] == [9]
    assert "retried by an operator" in text(ok)  # the timeline
    row = AuditEntry.objects.get(outcome="ok")
    assert (row.action, row.parameters["state"]) == ("replay", "FAILED")
    assert row.parameters["edit"]["after"] == {
        "args": [9],
        "kwargs": {},
        "queue": "tests",
        "priority": 50,
    }
    assert operator.get(url("task_edit", task_id)).status_code == 404  # queued again
