"""Wait and run latency histograms, counted by the scripts and exported to Prometheus."""

import pytest

from dtq.api.metrics import render
from dtq.engine import read_side
from dtq.engine.latency import Latencies
from tests.testapp import tasks

pytestmark = pytest.mark.slow


def test_claim_and_finalize_count_latencies(dtq_env):
    for i in range(3):
        tasks.record.enqueue(i)
    tasks.hold.enqueue(0.3)
    assert dtq_env.worker("--burst", "--concurrency", "4").wait(60) == 0

    latency = read_side.queue_overview("tests")["latency"]
    run, wait = latency["run"], latency["wait"]
    assert run["count"] == 4 and wait["count"] == 4
    buckets = dict(run["buckets"])
    assert buckets[0.25] == 3  # the three quick ones
    assert buckets[float("inf")] == 4  # and the 0.3 s one
    assert 0.3 <= run["sum"] < 5
    assert [count for _, count in run["buckets"]] == sorted(c for _, c in run["buckets"])
    assert "h_run_sum" not in read_side.queue_overview("tests")["counters"]


def test_metrics_export_histograms(dtq_env):
    tasks.record.enqueue(1)
    assert dtq_env.worker("--burst").wait(60) == 0
    text = render()
    assert "# TYPE dtq_task_run_seconds histogram" in text
    assert 'dtq_task_run_seconds_bucket{queue="tests",le="+Inf"} 1' in text
    assert 'dtq_task_wait_seconds_count{queue="tests"} 1' in text
    assert 'dtq_task_wait_seconds_bucket{queue="tests",le="0.005"}' in text


def test_the_worker_counts_each_observation_in_its_le_bucket() -> None:
    latencies = Latencies()
    for ms in (5, 5.5, 0, 400_000, -1):  # -1: another host's clock, dropped
        latencies.observe(0, "q", "wait", ms)
    latencies.observe(1, "q", "run", 10)
    counts = latencies.take()
    assert counts[(0, "q")] == {"h_wait_1": 2, "h_wait_2": 1, "h_wait_15": 1, "h_wait_sum": 400_010}
    assert counts[(1, "q")] == {"h_run_2": 1, "h_run_sum": 10}
    assert latencies.take() == {}
    latencies.put_back(counts)  # a failed write: added with the next ones
    latencies.observe(1, "q", "run", 10)
    assert latencies.take()[(1, "q")] == {"h_run_2": 2, "h_run_sum": 20}
