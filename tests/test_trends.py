"""Dashboard trends: latency quantiles from the histograms, per-queue throughput sparklines."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from dtq.engine import read_side
from dtq.engine.read_side.trends import quantile, throughput_per_queue
from tests.conftest import wait_for
from tests.ops_support import dead_letter_by_hand
from tests.test_admin_pages import operator  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def hist(*pairs: tuple[float, int]) -> Any:
    return {"buckets": list(pairs), "sum": 0.0, "count": pairs[-1][1]}


def test_quantiles_interpolate_inside_the_bucket() -> None:
    inf = float("inf")
    h = hist((0.1, 50), (1.0, 90), (10.0, 100), (inf, 100))
    assert quantile(h, 0.5) == pytest.approx(0.1)
    assert quantile(h, 0.7) == pytest.approx(0.1 + 0.9 * 20 / 40)
    assert quantile(h, 0.95) == pytest.approx(1.0 + 9.0 * 5 / 10)
    assert quantile(hist((0.1, 0), (inf, 0)), 0.5) is None
    assert quantile(hist((0.1, 0), (inf, 3)), 0.5) == 0.1  # past the last bound: that bound


def test_throughput_per_queue_and_the_dashboard_columns(dtq_env: Any, operator: Any) -> None:  # noqa: F811
    done = [tasks.record.enqueue(i) for i in range(3)]
    tasks.record.using(queue_name="other").enqueue()
    dead_letter_by_hand(1, "other")
    dtq_env.worker("--burst").wait(30)
    wait_for(lambda: all(r.refresh() or r.state == "SUCCEEDED" for r in done))
    rows = throughput_per_queue(["tests", "other"], 5)
    assert sum(r["succeeded"] for r in rows["tests"]) == 3
    assert sum(r["dead_lettered"] for r in rows["other"]) == 1
    assert len(rows["tests"]) == 5
    wait = read_side.queue_overview("tests")["latency"]["wait"]
    assert quantile(wait, 0.5) is not None
    page = operator.get(reverse("admin:dtq_taskqueue_changelist")).content.decode()
    assert 'aria-label="3 succeeded, 0 failed in 60 min"' in page
    assert 'aria-label="0 succeeded, 1 failed in 60 min"' in page
    assert 'class="dtq-spark-fail"' in page
