"""The admin dashboard in a real browser: live counts, DLQ replay, purge and its audit row."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from dtq.engine import read_side
from tests.browser.conftest import Site, screenshot
from tests.conftest import Env, wait_for
from tests.ops_support import dead_letter_by_hand
from tests.testapp import tasks

pytestmark = pytest.mark.slow
OVERVIEW = "/admin/dtq/taskqueue/"


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    # Generous: worker processes boot Django first, and CI machines can be busy.
    playwright_expect.set_options(timeout=20_000)
    return playwright_expect(locator)


def open_live(page: Any, path: str) -> None:
    """Open a dtq page and wait until its websocket is connected."""
    page.goto(path)
    expect(page.locator("#dtq-live")).to_have_attribute("data-state", "live")
    page.evaluate("window.__same_page = true")  # gone if anything reloads the page


def still_same_page(page: Any) -> bool:
    return bool(page.evaluate("window.__same_page === true"))


def cell(page: Any, queue: str, field: str) -> Any:
    return page.locator(f'#dtq-queues tr[data-queue="{queue}"] [data-field="{field}"]')


def test_overview_counts_follow_a_running_task_without_reload(page, dtq_env: Env):
    tasks.poison.using(queue_name="reports").enqueue()
    dead_letter_by_hand(1, "reports")  # a second queue, with a failure on the chart
    tasks.record.enqueue("warm-up")  # the queue exists before the page opens
    open_live(page, OVERVIEW)
    expect(cell(page, "reports", "dlq")).to_have_text("1")
    expect(page.locator("#dtq-failed")).to_have_text("1")
    expect(cell(page, "tests", "queued")).to_have_text("1")
    result = tasks.hold.enqueue(6)
    expect(cell(page, "tests", "queued")).to_have_text("2")
    dtq_env.worker("--concurrency", "4")
    expect(cell(page, "tests", "running")).to_have_text("1")
    expect(cell(page, "tests", "queued")).to_have_text("0")
    expect(page.locator("#dtq-workers tbody tr")).to_have_count(1)
    expect(page.locator("#dtq-events")).to_contain_text("TASK_STARTED")
    screenshot(page, "overview")
    expect(cell(page, "tests", "running")).to_have_text("0", timeout=30_000)
    expect(page.locator("#dtq-succeeded")).to_have_text("2")
    assert still_same_page(page)
    result.refresh()
    assert result.state == "SUCCEEDED"


def test_replay_a_dead_lettered_task_and_watch_it_succeed(page, dtq_env: Env):
    tasks.record.enqueue("first run fails")
    [task_id] = dead_letter_by_hand(1)
    dtq_env.worker()
    page.goto("/admin/dtq/taskqueue/dlq/?queue=tests")
    row = page.locator(f'#dtq-dlq tr[data-task="{task_id}"]')
    expect(row).to_contain_text("builtins.ValueError")
    screenshot(page, "dlq")
    row.locator("input[type=checkbox]").check()
    page.select_option("select[name=action]", "replay")
    page.click("text=Go…")
    expect(page.locator("h1")).to_have_text("Replay dead-lettered tasks?")
    expect(page.locator(".dtq-selected")).to_contain_text(task_id)
    screenshot(page, "dlq-confirm")
    page.click("#dtq-confirm")
    expect(page.locator(".messagelist")).to_contain_text("Replay: 1 of 1 selected entries.")
    expect(page.locator("#dtq-dlq")).to_contain_text("Nothing here.")
    page.goto(f"/admin/dtq/taskqueue/tasks/{task_id}/")
    expect(page.locator('#dtq-task-facts [data-field="state"]')).to_have_text("SUCCEEDED")
    expect(page.locator("#dtq-result")).to_have_text('"first run fails"')
    expect(page.locator("#dtq-timeline")).to_contain_text("replayed from the DLQ")
    screenshot(page, "task")


def test_a_task_row_follows_its_state_live(page, dtq_env: Env):
    result = tasks.hold.enqueue(2)
    open_live(page, "/admin/dtq/taskqueue/tasks/?queue=tests")
    state = page.locator(f'#dtq-tasks tr[data-task="{result.id}"] [data-field="state"]')
    expect(state).to_have_text("QUEUED")
    dtq_env.worker()
    expect(state).to_have_text("RUNNING")
    expect(state).to_have_text("SUCCEEDED")
    screenshot(page, "tasks")
    assert still_same_page(page)


def test_the_page_reconnects_and_catches_up_after_the_server_was_down(
    page, site: Site, dtq_env: Env
):
    result = tasks.record.enqueue("while nobody watched")
    open_live(page, "/admin/dtq/taskqueue/tasks/?queue=tests")
    state = page.locator(f'#dtq-tasks tr[data-task="{result.id}"] [data-field="state"]')
    expect(state).to_have_text("QUEUED")
    site.stop()
    expect(page.locator("#dtq-live")).to_have_attribute("data-state", re.compile("reconnect"))
    dtq_env.worker("--burst").wait(30)
    assert read_side.get_task(result.id)["state"] == "SUCCEEDED"
    site.start()  # same port: the page reconnects to it
    expect(page.locator("#dtq-live")).to_have_attribute("data-state", "live", timeout=30_000)
    expect(state).to_have_text("SUCCEEDED")  # from the catch-up: published while no one listened
    assert still_same_page(page)


def test_purge_through_the_confirmation_page_and_find_the_audit_row(page, dtq_env: Env):
    for i in range(5):
        tasks.record.enqueue(i)
    tasks.record.using(run_after=timedelta(minutes=5)).enqueue()
    page.goto(OVERVIEW)
    page.locator('#dtq-queues tr[data-queue="tests"]').get_by_text("Purge…").click()
    expect(page.locator("h1")).to_have_text("Purge queue tests?")
    expect(page.locator('#dtq-purge-preview [data-field="queued"]')).to_have_text("5")
    expect(page.locator('#dtq-purge-preview [data-field="scheduled"]')).to_have_text("1")
    page.click("#dtq-confirm")  # the browser refuses: the reason is required
    assert read_side.queue_overview("tests")["queued"] == 5
    page.fill("textarea[name=reason]", "browser test clean-up")
    screenshot(page, "purge-confirm")
    page.click("#dtq-confirm")
    expect(page.locator(".messagelist")).to_contain_text("5 queued and 1 scheduled")
    expect(cell(page, "tests", "queued")).to_have_text("0")
    wait_for(lambda: read_side.queue_overview("tests")["scheduled"] == 0)
    page.goto("/admin/dtq/auditentry/")
    row = page.locator("#result_list tbody tr").first
    expect(row).to_contain_text("purge")
    expect(row).to_contain_text("browser test clean-up")
    expect(row).to_contain_text("6")
    screenshot(page, "audit-log")
