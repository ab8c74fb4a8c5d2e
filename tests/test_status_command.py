"""`manage.py dtq_status`: tables for people, JSON for machines."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dtq.engine import read_side
from tests.conftest import wait_for
from tests.testapp import tasks


def status(*args):
    out = StringIO()
    call_command("dtq_status", *args, stdout=out)
    return out.getvalue()


def section(text, title):
    """Return the table under a title line of the status output."""
    return text.split(f"\n{title}")[1].split("\n\n")[0] if f"\n{title}" in text else ""


def line_of(text, first_cell):
    [line] = [row for row in text.splitlines() if row.split()[:1] == [first_cell]]
    return line.split()


def test_empty_namespace_says_what_is_missing(dtq_env):
    text = status()
    assert "no queues yet" in text
    assert "no workers" in text
    assert line_of(text, "scheduler")[-2:] == ["NONE", "ALIVE"]
    assert line_of(text, "reaper")[-2:] == ["NONE", "ALIVE"]


def test_table_shows_queues_counters_workers_and_processes(dtq_env):
    tasks.record.enqueue(1)
    tasks.hold.using(priority=80).enqueue(30)
    tasks.record.using(run_after=timedelta(minutes=5)).enqueue()
    tasks.record.using(queue_name="other", priority=-80).enqueue()
    dtq_env.worker("--worker-id", "status-w1", "--with-scheduler", "--with-reaper")
    wait_for(lambda: read_side.queue_overview("tests")["running"] == 1)
    wait_for(lambda: all(read_side.processes(role) for role in read_side.ROLES))
    wait_for(lambda: [w for w in read_side.workers() if (w["processed"], w["in_flight"]) == (1, 1)])
    text = status()

    queues = section("\n" + text, "Queues")
    assert line_of(queues, "queue")[:8] == [
        *("queue", "high", "normal", "low", "pending", "running", "scheduled", "dlq")
    ]
    # tests: high band holds the running task's entry (pending), one delayed task scheduled.
    assert line_of(queues, "tests")[:10] == ["tests", "1", "0", "0", "1", "1", "1", "0", "no", "-"]
    assert line_of(queues, "other")[:9] == ["other", "0", "0", "1", "0", "0", "0", "0", "no"]
    counters = section(text, "Counters")
    assert line_of(counters, "queue")[1:3] == ["submitted", "succeeded"]
    assert line_of(counters, "tests")[:3] == ["tests", "3", "1"]

    worker = line_of(text, "status-w1")
    assert worker[1:5] == ["tests", "1/16", "0", "1"]
    assert worker[-1] == "yes"
    assert line_of(text, "scheduler")[-1] == "yes"
    assert line_of(text, "reaper")[-1] == "yes"


def test_json_output_carries_the_read_side_data(dtq_env):
    tasks.record.enqueue(1)
    tasks.poison.using(max_attempts=1).enqueue()
    dtq_env.worker("--worker-id", "status-w2", "--with-reaper")
    wait_for(lambda: read_side.queue_overview("tests")["dlq"] == 1)
    wait_for(lambda: read_side.processes("reaper"))
    data = json.loads(status("--json"))
    assert set(data) == {"queues", "queues_total", "next_queue", "workers", "processes"}
    [queue] = data["queues"]
    assert queue["name"] == "tests"
    assert queue["dlq"] == 1
    assert queue["counters"]["succeeded"] == 1
    assert queue["counters"]["dead_lettered"] == 1
    [worker] = data["workers"]
    assert worker["id"] == "status-w2"
    assert worker["alive"] is True
    assert data["processes"]["scheduler"] == []
    assert [p["alive"] for p in data["processes"]["reaper"]] == [True]


def test_queue_option_limits_the_queues_shown(dtq_env):
    tasks.record.enqueue(1)
    tasks.record.using(queue_name="other").enqueue()
    data = json.loads(status("--json", "--queue", "other"))
    assert [q["name"] for q in data["queues"]] == ["other"]
    with pytest.raises(CommandError, match="invalid queue name"):
        status("--queue", "no such queue")
