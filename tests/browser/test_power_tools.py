"""Operator power tools in a real browser: search, edit and replay, run by hand, progress."""

from __future__ import annotations

import pytest

from dtq.engine import read_side
from tests.browser.conftest import screenshot
from tests.browser.test_dashboard import expect, open_live, still_same_page
from tests.conftest import Env, wait_for
from tests.ops_support import dead_letter_by_hand, fail_by_hand
from tests.testapp import tasks

pytestmark = pytest.mark.slow
TASKS = "/admin/dtq/taskqueue/tasks/"


def test_search_by_an_argument_value(page, dtq_env: Env):
    tasks.record.enqueue({"user_id": 41})
    wanted = tasks.record.using(queue_name="other").enqueue({"user_id": 42}).id
    page.goto(TASKS)
    page.fill("input[name=q]", "args.0.user_id=42")
    page.click("#dtq-search button[type=submit]")
    rows = page.locator("#dtq-tasks tbody tr[data-task]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-task", wanted)
    assert "q=args.0.user_id%3D42" in page.url  # the search is the address: shareable
    page.locator("#dtq-search-help summary").click()
    screenshot(page, "search")


def test_edit_a_dead_lettered_tasks_arguments_and_watch_it_succeed(page, dtq_env: Env):
    task_id = tasks.record.enqueue("wrong").id
    dead_letter_by_hand(1)
    dtq_env.worker()
    page.goto(f"{TASKS}{task_id}/")
    page.click("#dtq-edit-link")
    page.fill("textarea[name=args]", '["fixed"]')
    page.fill("input[name=reason]", "typo in the argument")
    screenshot(page, "edit-replay")
    page.click("#dtq-edit-submit")
    expect(page.locator(".messagelist")).to_contain_text("Edited and replayed")
    expect(page.locator('#dtq-task-facts [data-field="state"]')).to_have_text("SUCCEEDED")
    expect(page.locator("#dtq-result")).to_have_text('"fixed"')


def test_edit_a_failed_tasks_arguments_and_watch_it_succeed(page, dtq_env: Env):
    task_id = tasks.record.enqueue("wrong").id
    assert fail_by_hand(1) == [task_id]  # FAILED with the DLQ off: no DLQ entry
    dtq_env.worker()
    page.goto(f"{TASKS}{task_id}/")
    expect(page.locator('#dtq-task-facts [data-field="state"]')).to_have_text("FAILED")
    page.click("#dtq-retry-link")
    expect(page.locator("#dtq-edit-submit")).to_have_text("Retry with these values")
    page.fill("textarea[name=args]", '["wrong", "extra"]')  # does not fit the signature
    page.click("#dtq-edit-submit")
    expect(page.locator(".messagelist")).to_contain_text("Not retried: arguments do not fit")
    page.fill("textarea[name=args]", '["fixed"]')
    page.fill("input[name=priority]", "30")
    page.fill("input[name=reason]", "typo in the argument")
    screenshot(page, "edit-retry")
    page.click("#dtq-edit-submit")
    expect(page.locator(".messagelist")).to_contain_text("Edited and retried")
    expect(page.locator('#dtq-task-facts [data-field="state"]')).to_have_text("SUCCEEDED")
    expect(page.locator("#dtq-result")).to_have_text('"fixed"')
    expect(page.locator("#dtq-timeline")).to_contain_text("retried by an operator")


def test_bulk_retry_failed_tasks_matching_a_filter_and_watch_them_succeed(page, dtq_env: Env):
    for i in range(150):  # two batches of 100
        tasks.record.enqueue(i)
    fail_by_hand(150)
    page.goto(f"{TASKS}?q=state%3AFAILED&queue=tests")
    page.select_option("#dtq-bulk-action", "retry")
    page.check("#dtq-bulk-matching")
    page.click("#dtq-bulk-submit")
    expect(page.locator("#dtq-bulk-count")).to_contain_text("Retry 150 tasks")
    page.click("#dtq-bulk-confirm")
    expect(page.locator("#dtq-bulk-text")).to_have_text(
        "150 done, 0 skipped of 150 · finished · ok"
    )
    dtq_env.worker()
    wait_for(lambda: dtq_env.stats().get("succeeded") == 150, timeout=60)
    page.goto(f"{TASKS}?q=state%3ASUCCEEDED&queue=tests")
    expect(page.locator("#dtq-tasks tbody tr[data-task]")).to_have_count(50)  # a full page
    page.goto(f"{TASKS}?q=state%3AFAILED&queue=tests")
    expect(page.locator("#dtq-tasks .dtq-empty")).to_be_visible()


def test_start_a_task_from_the_form(page, dtq_env: Env):
    dtq_env.worker()
    page.goto("/admin/dtq/taskqueue/run/")
    page.select_option("#dtq-run-task", tasks.record.name)
    page.fill("textarea[name=args]", '["by hand"]')
    page.fill("input[name=priority]", "20")
    screenshot(page, "run-task")
    page.click("#dtq-run-submit")
    expect(page.locator(".messagelist")).to_contain_text("submitted")
    expect(page.locator('#dtq-task-facts [data-field="state"]')).to_have_text("SUCCEEDED")
    expect(page.locator("#dtq-result")).to_have_text('"by hand"')


def test_watch_a_progress_bar_move_on_a_running_task(page, dtq_env: Env):
    result = tasks.steps.enqueue(8, 0.6)
    open_live(page, f"{TASKS}?queue=tests")
    bar = page.locator(f'#dtq-tasks tr[data-task="{result.id}"] [data-field="progress"] progress')
    dtq_env.worker()
    expect(bar).to_have_attribute("value", "0.25")  # live, from the TASK_PROGRESS events
    expect(bar).to_have_attribute("value", "0.625")
    screenshot(page, "progress")
    expect(bar).to_have_attribute("value", "1")
    assert still_same_page(page)
    page.goto(f"{TASKS}{result.id}/")
    expect(page.locator("#dtq-task-facts")).to_contain_text("100% · step 8 of 8")


def test_a_workers_page_shows_what_it_runs_now_and_what_it_ran(page, dtq_env: Env):
    done = tasks.record.enqueue("first").id
    dtq_env.worker()
    wait_for(lambda: read_side.get_task(done)["state"] == "SUCCEEDED", timeout=60)
    running = tasks.steps.enqueue(20, 0.5).id
    wait_for(lambda: (read_side.get_task(running)["progress"] or {}).get("fraction", 0) >= 0.1)
    page.goto("/admin/dtq/taskqueue/workers/")
    page.locator("#dtq-worker-list tbody tr[data-worker] a").first.click()
    row = page.locator(f'#dtq-worker-running tr[data-task="{running}"]')
    expect(row.locator("progress")).to_be_visible()
    expect(row).to_contain_text("tests.testapp.tasks.steps")
    expect(page.locator(f'#dtq-worker-history tr[data-task="{done}"]')).to_contain_text("SUCCEEDED")
    screenshot(page, "worker")


def test_bulk_retry_everything_matching_a_filter_and_watch_the_progress_bar(page, dtq_env: Env):
    for i in range(250):  # three batches of 100
        tasks.record.enqueue(i)
    dead_letter_by_hand(250)
    page.goto(f"{TASKS}?q=state%3ADEAD_LETTERED&queue=tests")
    page.select_option("#dtq-bulk-action", "retry")
    page.check("#dtq-bulk-matching")
    page.click("#dtq-bulk-submit")
    expect(page.locator("#dtq-bulk-count")).to_contain_text("Retry 250 tasks")
    screenshot(page, "bulk-confirm")
    page.fill("input[name=reason]", "the bug is fixed")
    page.click("#dtq-bulk-confirm")
    bar = page.locator("#dtq-bulk-progress")
    expect(bar).to_have_attribute("max", "250")
    expect(bar).to_have_attribute("value", "250")
    expect(page.locator("#dtq-bulk-text")).to_have_text(
        "250 done, 0 skipped of 250 · finished · ok"
    )
    expect(page.locator("#dtq-bulk-job")).to_have_attribute("data-state", "finished")
    screenshot(page, "bulk-progress")
    page.goto(f"{TASKS}?q=state%3ADEAD_LETTERED&queue=tests")
    expect(page.locator("#dtq-tasks .dtq-empty")).to_be_visible()
