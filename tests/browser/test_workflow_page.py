"""The workflow page in a real browser: the graph follows the run live, without a reload."""

from __future__ import annotations

import pytest

import dtq
from tests.browser.conftest import screenshot
from tests.browser.test_dashboard import expect, open_live, still_same_page
from tests.conftest import Env
from tests.testapp import tasks

pytestmark = pytest.mark.slow


def test_watch_a_chord_fan_in_on_its_graph(page, dtq_env: Env):
    header = dtq.group(tasks.wf_slow.s(i, 1.5) for i in range(6))
    wf = dtq.chord(header, tasks.wf_collect.s()).enqueue()
    open_live(page, f"/admin/dtq/taskqueue/workflows/{wf.id}/")
    graph = page.locator("#dtq-workflow-graph")
    expect(graph.locator(".dtq-node-waiting")).to_have_count(1)  # the callback waits
    dtq_env.worker("--concurrency", "2")
    expect(graph.locator(".dtq-node-succeeded")).to_have_count(2)  # live, from the feed
    screenshot(page, "workflow")
    expect(page.locator('#dtq-workflow-facts [data-field="state"]')).to_have_text("SUCCEEDED")
    expect(graph.locator(".dtq-node-succeeded")).to_have_count(7)
    expect(page.locator("#dtq-workflow-facts")).to_contain_text("7 of 7 finished")
    assert still_same_page(page)
