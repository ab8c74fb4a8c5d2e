"""The read side (dtq.engine.read_side) against a real Redis, with real processes where needed."""

import os
import signal
import time
from datetime import timedelta

import pytest
import redis

import dtq
from dtq.engine import read_side
from dtq.engine.read_side import trends
from dtq.engine.scheduler import Scheduler
from tests.conftest import wait_for
from tests.testapp import tasks


def overview_of(queue="tests"):
    [row] = [q for q in read_side.overview() if q["name"] == queue]
    return row


def test_queue_names_lists_every_queue_used(dtq_env):
    assert read_side.queue_names() == []
    tasks.record.enqueue(1)
    tasks.record.using(queue_name="other").enqueue(2)
    assert read_side.queue_names() == ["other", "tests"]


def test_overview_counts_bands_states_and_schedule(dtq_env):
    for priority in (80, 0, 0, 0, -80):
        tasks.record.using(priority=priority).enqueue()
    for _ in range(2):
        tasks.record.using(run_after=timedelta(minutes=5)).enqueue()
    row = read_side.queue_overview("tests")
    assert row["depth"] == [1, 3, 1]
    assert row["waiting"] == [1, 3, 1]
    assert row["pending"] == [0, 0, 0]
    assert (row["queued"], row["running"], row["scheduled"], row["dlq"]) == (5, 0, 2, 0)
    assert row["states"]["PENDING"] == 2
    assert row["counters"]["submitted"] == 7
    assert row["counters"]["active"] == 7
    assert row["counters"]["succeeded"] == 0
    assert 0 <= row["oldest_waiting_age"] < 60
    assert row["paused"] is False
    same = overview_of("tests")
    assert {k: v for k, v in same.items() if k != "oldest_waiting_age"} == {
        k: v for k, v in row.items() if k != "oldest_waiting_age"
    }


def test_unknown_queue_reads_as_empty(dtq_env):
    row = read_side.queue_overview("nothing-here")
    assert row["depth"] == [0, 0, 0]
    assert row["oldest_waiting_age"] is None
    assert read_side.overview() == []


def test_paused_flag_comes_from_the_paused_set(dtq_env):
    tasks.record.enqueue()
    dtq_env.client.sadd(dtq_env.keys.paused, "tests")
    assert read_side.queue_overview("tests")["paused"] is True
    assert overview_of("tests")["paused"] is True


def test_a_running_task_is_pending_and_running_and_its_worker_is_listed(dtq_env):
    dtq_env.configure(HEARTBEAT_INTERVAL=0.1, LEASE_TIMEOUT=1.0)
    result = tasks.hold.enqueue(30)
    proc = dtq_env.worker("--worker-id", "reader-w1", "--concurrency", "4")
    wait_for(lambda: read_side.queue_overview("tests")["running"] == 1)
    row = read_side.queue_overview("tests")
    assert row["depth"] == [0, 1, 0]
    assert row["pending"] == [0, 1, 0]
    assert row["waiting"] == [0, 0, 0]
    assert row["queued"] == 0
    assert row["oldest_waiting_age"] is None

    [worker] = wait_for(lambda: [w for w in read_side.workers() if w["in_flight"] == 1])
    assert worker["id"] == "reader-w1"
    assert worker["pid"] == proc.pid
    assert worker["queues"] == ["tests"]
    assert worker["concurrency"] == 4
    assert worker["state"] == "running"
    assert worker["alive"] is True
    assert worker["heartbeat_age"] < 2 * 1.0

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # No reaper runs here, so the dead worker stays registered and shows as not alive.
    wait_for(lambda: [w for w in read_side.workers() if not w["alive"]], timeout=10)
    [worker] = read_side.workers()
    assert worker["heartbeat_age"] >= 2 * 1.0
    assert read_side.get_task(result.id)["state"] == "RUNNING"


def test_outcomes_show_in_counters_dlq_and_throughput(dtq_env):
    results = [tasks.record.enqueue(1), tasks.record.enqueue(2)]
    results += [tasks.poison.enqueue(), tasks.permanent.enqueue()]
    dtq_env.worker("--with-scheduler")
    for result in results:
        wait_for(lambda r=result: r.refresh() or r.is_finished)
    row = read_side.queue_overview("tests")
    assert row["dlq"] == 2
    assert row["states"]["SUCCEEDED"] == 2
    assert row["states"]["DEAD_LETTERED"] == 2
    counters = row["counters"]
    assert counters["succeeded"] == 2
    assert counters["dead_lettered"] == 2
    assert counters["retried"] == 2  # poison: attempts 1 and 2 retried, 3 dead-lettered
    assert counters["started"] == 6
    assert counters["active"] == 0
    assert row["depth"] == [0, 0, 0]

    before = time.time()
    rows = read_side.throughput("tests", minutes=3)
    assert len(rows) == 3
    assert before - 60 < rows[-1]["minute"] <= time.time()
    assert [r["minute"] for r in rows] == [rows[0]["minute"] + 60 * i for i in range(3)]
    total = {name: sum(r[name] for r in rows) for name in read_side.THROUGHPUT_COUNTERS}
    assert total["submitted"] == 4
    assert total["succeeded"] == 2
    assert total["dead_lettered"] == 2
    assert sum(r["succeeded"] for r in read_side.throughput(None, minutes=3)) == 2
    assert sum(r["submitted"] for r in read_side.throughput("other", minutes=3)) == 0


def count_round_trips(monkeypatch):
    """Count pipelines and single commands sent by the read side's client."""
    sent = {"round_trips": 0, "commands": []}
    execute = redis.client.Pipeline.execute
    command = redis.Redis.execute_command

    def counting_execute(self, raise_on_error=True):
        sent["round_trips"] += 1
        sent["commands"] += [str(c[0][0]).upper() for c in self.command_stack]
        return execute(self, raise_on_error)

    def counting_command(self, *args, **options):
        sent["round_trips"] += 1
        sent["commands"].append(str(args[0]).upper())
        return command(self, *args, **options)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_execute)
    monkeypatch.setattr(redis.Redis, "execute_command", counting_command)
    return sent


def test_overview_of_many_queues_takes_two_round_trips_and_never_scans(dtq_env, monkeypatch):
    for n in range(6):
        tasks.record.using(queue_name=f"q{n}").enqueue()
    read_side.queue_names()  # connect (and warm the pool) before counting
    sent = count_round_trips(monkeypatch)
    rows = read_side.overview()
    assert [r["name"] for r in rows] == [f"q{n}" for n in range(6)]
    assert all(r["depth"] == [0, 1, 0] for r in rows)
    assert sent["round_trips"] == 2
    assert not {"SCAN", "KEYS"} & set(sent["commands"])

    sent = count_round_trips(monkeypatch)
    read_side.list_tasks("q1")
    read_side.workers()
    read_side.processes("reaper")
    assert sent["round_trips"] <= 5
    assert not {"SCAN", "KEYS"} & set(sent["commands"])


def test_list_tasks_pages_newest_first_without_gaps_or_repeats(dtq_env):
    submitted = {tasks.record.enqueue(i).id for i in range(7)}
    delayed = tasks.record.using(run_after=timedelta(minutes=5)).enqueue().id
    seen, cursor, pages = [], None, 0
    while True:
        page = read_side.list_tasks("tests", limit=3, cursor=cursor)
        seen += page["tasks"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert [t["id"] for t in seen] == [t["id"] for t in read_side.list_tasks("tests")["tasks"]]
    assert {t["id"] for t in seen} == submitted | {delayed}
    times = [t["updated_at"] for t in seen]
    assert times == sorted(times, reverse=True)
    assert delayed in {t["id"] for t in seen if t["updated_at"] == times[0]}  # submitted last
    [record] = [t for t in seen if t["id"] == delayed]
    assert (record["state"], record["payload"]) == ("PENDING", {"args": [], "kwargs": {}})

    queued = read_side.list_tasks("tests", state="QUEUED")["tasks"]
    assert {t["id"] for t in queued} == submitted
    assert [t["id"] for t in read_side.list_tasks("tests", state="PENDING")["tasks"]] == [delayed]
    assert read_side.list_tasks("tests", state="SUCCEEDED") == {"tasks": [], "next_cursor": None}


def test_list_tasks_pages_through_tasks_that_share_a_timestamp(dtq_env):
    early = [tasks.record.enqueue(i).id for i in range(2)]
    batch = [tasks.record.using(run_after=timedelta(seconds=0.05)).enqueue(i).id for i in range(10)]
    time.sleep(0.1)  # past the batch's due time: the scheduler only promotes due members
    Scheduler().run_once()  # one promote.lua call moves all ten, under one timestamp
    index = dtq_env.keys.index("tests", "QUEUED")
    assert len({dtq_env.client.zscore(index, task_id) for task_id in batch}) == 1

    seen, cursor = [], None
    while True:
        page = read_side.list_tasks("tests", state="QUEUED", limit=3, cursor=cursor)
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 12
    assert set(seen[:10]) == set(batch)
    assert set(seen[10:]) == set(early)


def test_list_tasks_leaves_out_records_gone_since_indexed(dtq_env):
    ids = [tasks.record.enqueue(i).id for i in range(3)]
    dtq_env.client.delete(dtq_env.keys.task(ids[1]))
    listed = [t["id"] for t in read_side.list_tasks("tests")["tasks"]]
    assert listed == [ids[2], ids[0]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue": "bad queue"},
        {"queue": "tests", "state": "SLEEPING"},
        {"queue": "tests", "limit": 0},
        {"queue": "tests", "cursor": "yesterday"},
        {"queue": "tests", "cursor": "123:not-an-id"},
    ],
)
def test_list_tasks_rejects_bad_arguments(dtq_env, kwargs):
    with pytest.raises(ValueError):
        read_side.list_tasks(**kwargs)


def test_processes_lists_live_schedulers_and_reapers_and_forgets_old_ones(dtq_env):
    assert read_side.processes("scheduler") == []
    with pytest.raises(ValueError, match="unknown role"):
        read_side.processes("janitor")
    old = time.time() - 2 * 3600
    dtq_env.client.zadd(dtq_env.keys.processes("scheduler"), {"long-gone": old})
    scheduler = dtq_env.spawn("dtq_scheduler")
    dtq_env.spawn("dtq_reaper")
    [sched] = wait_for(lambda: [p for p in read_side.processes("scheduler") if p["alive"]])
    [reaper] = wait_for(lambda: read_side.processes("reaper"))
    assert reaper["alive"] is True
    assert reaper["heartbeat_age"] < 5
    # Beating pruned the entry older than the registry keeps.
    assert [p["id"] for p in read_side.processes("scheduler")] == [sched["id"]]

    scheduler.send_signal(signal.SIGTERM)
    assert scheduler.wait(15) == 0
    assert read_side.processes("scheduler") == []
    assert [p["id"] for p in read_side.processes("reaper")] == [reaper["id"]]


def test_get_task_reads_a_finished_task_with_its_result(dtq_env):
    result = tasks.record.enqueue({"x": 1})
    dtq_env.worker()
    wait_for(lambda: result.refresh() or result.is_finished)
    record = read_side.get_task(result.id)
    assert record["state"] == dtq.TaskState.SUCCEEDED
    assert record["result"] == {"x": 1}
    assert record["history"][0]["outcome"] == "succeeded"
    assert read_side.get_task("not-an-id") is None


def test_a_task_queued_at_submit_counts_as_submitted_and_queued(dtq_env):
    # submit counts it once, in submitted_queued; a stats hash written before that field
    # existed keeps its own submitted and queued, and the read side adds the two.
    dtq_env.client.hset(dtq_env.keys.stats("tests"), mapping={"submitted": 5, "queued": 4})
    tasks.record.enqueue(1)
    tasks.record.enqueue_many([((2,), {}), ((3,), {})])
    tasks.record.using(run_after=timedelta(hours=1)).enqueue(4)
    counters = read_side.queue_overview("tests")["counters"]
    assert (counters["submitted"], counters["queued"], counters["active"]) == (9, 7, 4)
    assert "submitted_queued" not in counters
    rows = read_side.throughput("tests", minutes=2)
    assert (sum(r["submitted"] for r in rows), sum(r["queued"] for r in rows)) == (4, 3)
    [per_queue] = trends.throughput_per_queue(["tests"], minutes=2).values()
    assert sum(r["queued"] for r in per_queue) == 3
    assert "tests" in read_side.queue_names()
