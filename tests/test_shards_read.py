"""The read side, the event feed and queue-wide operator actions over SHARDS=3 (#20).

All shards share the test's Redis server here (a Cluster is not needed for the logic): tasks
are put on each shard with ids made for it, and every check looks at every shard's keys.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dtq.engine import bulk_jobs, events, gateway, ids, ops, read_side, shards
from dtq.engine.events import EventFeed
from dtq.engine.latency import Latencies
from dtq.engine.read_side import query
from dtq.engine.read_side.budget import read_budget
from dtq.engine.read_side.shard_pipe import ShardPipeline
from dtq.engine.state import TaskState
from dtq.engine.submit import Submission, submit
from dtq.models import AuditEntry
from tests.conftest import wait_for
from tests.ops_support import ACTOR, dead_letter_by_hand, fail_by_hand
from tests.test_api_support import api  # noqa: F401
from tests.testapp import tasks

SHARDS = 3
pytestmark = pytest.mark.django_db(transaction=True)  # actions write audit rows


@pytest.fixture
def sharded(dtq_env):
    dtq_env.configure(SHARDS=SHARDS)
    return dtq_env


def enqueue_on(shard: int, n: int = 1, queue: str = "tests", **options) -> list[str]:
    """Submit n `record` tasks on one shard (ids made for it); return their ids."""
    return [
        submit(
            Submission(
                name=tasks.record.name,
                queue=queue,
                args=[i],
                task_id=ids.new_id(shard),
                **options,
            )
        ).id
        for i in range(n)
    ]


def spread(n_per_shard: int, queue: str = "tests") -> list[str]:
    """Submit tasks on every shard in turn, a millisecond apart; return their ids."""
    made = []
    for _ in range(n_per_shard):
        for shard in range(SHARDS):
            made += enqueue_on(shard, queue=queue)
            time.sleep(0.002)
    return made


def test_tasks_land_on_the_shard_their_id_names(sharded):
    [task_id] = enqueue_on(2)
    assert sharded.client.exists(shards.keys(2).task(task_id))
    assert not sharded.client.exists(shards.keys(0).task(task_id))
    assert read_side.get_task(task_id)["state"] == TaskState.QUEUED


def test_one_pipeline_gives_replies_in_the_order_queued(sharded):
    for shard in range(SHARDS):
        enqueue_on(shard, n=shard + 1)
    pipe = ShardPipeline()
    for shard in (2, 0, 1):
        pipe.on(shard).zcard(shards.keys(shard).index("tests", TaskState.QUEUED))
    assert len(pipe) == 3
    assert pipe.execute() == [3, 1, 2]


def test_queue_names_and_counts_sum_every_shard(sharded):
    enqueue_on(0, n=1)
    enqueue_on(1, n=2, priority=80)
    enqueue_on(2, n=3, delay=300)
    enqueue_on(2, n=1, queue="other")  # a queue only shard 2 knows
    assert read_side.queue_names() == ["other", "tests"]
    row = read_side.queue_overview("tests")
    assert row["depth"] == [2, 1, 0]
    assert (row["queued"], row["scheduled"], row["dlq"]) == (3, 3, 0)
    assert row["states"]["PENDING"] == 3
    assert row["counters"]["submitted"] == 6
    assert row["oldest_waiting_age"] is not None
    [listed] = [q for q in read_side.overview() if q["name"] == "tests"]
    assert {k: v for k, v in listed.items() if k != "oldest_waiting_age"} == {
        k: v for k, v in row.items() if k != "oldest_waiting_age"
    }
    submitted = sum(r["submitted"] for r in read_side.throughput("tests", minutes=5))
    assert submitted == 6


def test_latency_histograms_and_dlq_sizes_sum_every_shard(sharded):
    latencies = Latencies()  # what workers count, each shard's in that shard's stats
    for shard in range(SHARDS):
        enqueue_on(shard, n=2)
        dead_letter_by_hand(2, shard=shard)
        latencies.observe(shard, "tests", "wait", 3)
        latencies.observe(shard, "tests", "wait", 30_000)
    for (shard, queue), fields in latencies.take().items():
        for name, n in fields.items():
            shards.client(shard).hincrby(shards.keys(shard).stats(queue), name, n)
    row = read_side.queue_overview("tests")
    assert row["dlq"] == 2 * SHARDS
    assert row["latency"]["wait"]["count"] == 2 * SHARDS
    assert row["latency"]["wait"]["buckets"][-1][1] == 2 * SHARDS
    assert row["counters"]["dead_lettered"] == 2 * SHARDS


def test_task_lists_merge_every_shard_newest_first_page_by_page(sharded):
    made = spread(4)
    seen: list[str] = []
    cursor = None
    while True:
        page = read_side.list_tasks("tests", TaskState.QUEUED, limit=5, cursor=cursor)
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1]  # one ms apart: newest first is the reverse of submit order


def test_a_task_list_stays_within_the_read_budget(sharded):
    spread(10)
    with read_budget(40) as budget:
        page = read_side.search_tasks(["tests"], None, limit=30)
    assert budget.spent <= 40
    assert page["tasks"] and page["next_cursor"] is not None and page["partial"]


def test_search_finds_matching_tasks_on_every_shard(sharded):
    found = {}
    for shard in range(SHARDS):
        [found[shard]] = enqueue_on(shard, queue="other")
        enqueue_on(shard)  # a task the query does not match
    page = query.run(query.parse("queue:other"), limit=10)
    assert sorted(t["id"] for t in page["tasks"]) == sorted(found.values())
    assert {ids.shard_of(t["id"]) for t in page["tasks"]} == set(range(SHARDS))


def dead_everywhere(per_shard: int) -> list[str]:
    """Dead-letter per_shard tasks on each shard, shard by shard; return their ids."""
    made = []
    for shard in range(SHARDS):
        enqueue_on(shard, n=per_shard)
        made += dead_letter_by_hand(per_shard, shard=shard)
        time.sleep(0.002)
    return made


def test_dlq_pages_merge_every_shard_newest_first(sharded):
    made = dead_everywhere(2)
    seen, cursor = [], None
    while True:
        page = read_side.dlq_entries("tests", limit=2, before=cursor)
        assert page["total"] == 2 * SHARDS
        seen += [e["task_id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == len(made)
    newest = read_side.search_dlq(["tests"], limit=2 * SHARDS)["entries"]
    assert [e["task_id"] for e in newest] == seen


def test_dlq_search_pages_over_shards_without_loss(sharded):
    made = dead_everywhere(3)
    seen, cursor = [], None
    while True:
        page = read_side.search_dlq(["tests"], limit=4, before=cursor)
        seen += [e["task_id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == len(made)


def test_entry_cursors_name_their_shard_and_refuse_one_out_of_range(sharded):
    assert read_side.entry_cursor("5-0", 0) == "5-0"
    assert read_side.parse_entry_cursor(read_side.entry_cursor("5-1", 2)) == ("5-1", 2)
    with pytest.raises(ValueError, match="cursor shard"):
        read_side.parse_entry_cursor(f"5-0@{SHARDS}")


def test_replay_all_replays_every_shards_entries(sharded):
    made = dead_everywhere(2)
    result = ops.replay_many("tests", actor=ACTOR)
    assert result.done == len(made)
    assert read_side.queue_overview("tests")["dlq"] == 0
    assert {read_side.get_task(t)["state"] for t in made} == {TaskState.QUEUED}


def test_a_limited_bulk_replay_continues_across_shards_from_its_cursor(sharded):
    made = dead_everywhere(2)
    done: list[str] = []
    after = None
    flt = ops.DlqFilter(limit=3)
    for _ in range(5):
        result = ops.replay_many("tests", actor=ACTOR, flt=flt, after=after)
        done += result.task_ids
        if not result.more:
            break
        after = result.next_cursor
    assert sorted(done) == sorted(made)


def test_one_replay_and_one_discard_reach_the_tasks_shard(sharded):
    made = dead_everywhere(1)
    assert ops.replay(made[2], actor=ACTOR) == "replayed"
    ops.discard(made[1], actor=ACTOR)
    assert read_side.get_task(made[2])["state"] == TaskState.QUEUED
    assert [e["task_id"] for e in read_side.dlq_entries("tests")["entries"]] == [made[0]]


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_a_bulk_job_by_query_acts_on_every_shards_entries(sharded, action):
    made = dead_everywhere(2)
    plan = bulk_jobs.plan(action, query="queue:tests state:DEAD_LETTERED")
    assert plan.count == len(made)
    bulk_jobs.start(plan.job_id, actor=ACTOR, reason="test")

    def finished() -> dict | None:
        job = bulk_jobs.progress(plan.job_id)
        return job if job and job["state"] == "finished" else None

    job = wait_for(finished)
    assert (job["done"], job["outcome"]) == (len(made), "ok")
    assert read_side.queue_overview("tests")["dlq"] == 0


def test_a_bulk_retry_retries_failed_and_dead_lettered_tasks_of_every_shard(sharded):
    made = dead_everywhere(1)
    for shard in range(SHARDS):
        enqueue_on(shard)
        made += fail_by_hand(1, shard=shard)
    plan = bulk_jobs.plan("retry", query="queue:tests state:DEAD_LETTERED,FAILED")
    assert plan.count == 2 * SHARDS
    bulk_jobs.start(plan.job_id, actor=ACTOR, reason="test")
    wait_for(lambda: (bulk_jobs.progress(plan.job_id) or {}).get("state") == "finished")
    assert bulk_jobs.progress(plan.job_id)["done"] == len(made)
    assert {read_side.get_task(t)["state"] for t in made} == {TaskState.QUEUED}


def test_purging_the_dlq_empties_every_shards_part(sharded):
    made = dead_everywhere(2)
    result = ops.purge_dlq("tests", actor=ACTOR, reason="cleanup")
    assert result.done == len(made)
    assert all(sharded.client.xlen(k.dlq("tests")) == 0 for k in shards.every())


def test_pause_and_resume_reach_every_shard(sharded):
    spread(1)
    assert ops.pause_queue("tests", actor=ACTOR) is True
    assert all(sharded.client.sismember(k.paused, "tests") for k in shards.every())
    assert read_side.queue_overview("tests")["paused"] is True
    assert ops.pause_queue("tests", actor=ACTOR) is False
    assert ops.resume_queue("tests", actor=ACTOR) is True
    assert not any(sharded.client.sismember(k.paused, "tests") for k in shards.every())


def test_a_pause_left_part_way_shows_and_is_completed_by_pausing_again(sharded):
    spread(1)
    sharded.client.sadd(shards.keys(1).paused, "tests")  # as if the others failed
    assert read_side.queue_overview("tests")["paused"] is True
    assert ops.pause_queue("tests", actor=ACTOR) is True
    assert all(sharded.client.sismember(k.paused, "tests") for k in shards.every())


def test_a_pause_that_fails_on_a_shard_says_how_far_it_got_and_runs_again(sharded, monkeypatch):
    spread(1)
    real = gateway.pause

    def down_on_shard_1(client, keys, *args):
        if keys.shard == 1:
            raise ConnectionError("shard 1's primary is down")
        return real(client, keys, *args)

    monkeypatch.setattr(gateway, "pause", down_on_shard_1)
    with pytest.raises(ConnectionError):
        ops.pause_queue("tests", actor=ACTOR)
    row = AuditEntry.objects.get()
    assert row.outcome == "error"
    assert (row.parameters["shards"], row.parameters["shards_done"]) == (SHARDS, 1)
    assert read_side.queue_overview("tests")["paused"] is True  # the mixed state shows
    monkeypatch.setattr(gateway, "pause", real)
    assert ops.pause_queue("tests", actor=ACTOR) is True
    assert all(sharded.client.sismember(k.paused, "tests") for k in shards.every())


def test_queue_limits_are_set_on_every_shard(sharded):
    spread(1)
    limits = ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=2, rate="10/s")
    assert (limits["max_concurrency"], limits["rate"]) == (2, "10/s")
    for keys in shards.every():
        assert sharded.client.hget(keys.limits("tests"), "max_concurrency") == "2"
    ops.set_queue_limits("tests", actor=ACTOR, max_concurrency=None, rate=None)
    assert ops.queue_limits("tests")["max_concurrency"] is None


def test_purge_cancels_waiting_tasks_on_every_shard(sharded):
    made = spread(2)
    enqueue_on(1, n=2, delay=300)
    preview = ops.preview_purge("tests")
    assert (preview.queued, preview.scheduled) == (len(made), 2)
    result = ops.purge_queue("tests", actor=ACTOR, reason="test")
    assert result.purged == len(made) + 2
    assert {read_side.get_task(t)["state"] for t in made} == {TaskState.CANCELLED}
    assert ops.preview_purge("tests").total == 0


def test_recent_events_come_from_every_shard_in_time_order(sharded):
    made = spread(1)
    recent = [e for e in events.recent(count=20) if e["type"] == "TASK_SUBMITTED"]
    assert [e["task"] for e in recent] == made
    assert len(events.latest_id().split(",")) == SHARDS


def test_the_feed_follows_every_shard_and_resumes_from_its_position(sharded):
    async def follow() -> tuple[list[str], str]:
        feed = EventFeed(poll=0.2)
        try:
            await feed.open(None)
            made = await asyncio.to_thread(spread, 1)
            got: list[str] = []
            for _ in range(50):
                batch = await feed.next()
                got += [e["task"] for e in batch.events if e["type"] == "TASK_SUBMITTED"]
                if len(got) >= len(made):
                    break
            assert sorted(got) == sorted(made)
            return made, feed.last_id
        finally:
            await feed.close()

    async def resume(position: str) -> list[str]:
        feed = EventFeed(poll=0.2)
        try:
            batch = await feed.open(position)
            assert not batch.gap
            return [e["task"] for e in batch.events if e["type"] == "TASK_SUBMITTED"]
        finally:
            await feed.close()

    made, position = asyncio.run(follow())
    assert {ids.shard_of(t) for t in made} == set(range(SHARDS))
    later = spread(1)
    assert asyncio.run(resume(position)) == later


def test_a_feed_with_one_client_per_shard_keeps_the_reads_still_waiting(sharded, monkeypatch):
    # As on a Cluster, where each shard's primary gets its own client and XREAD.
    monkeypatch.setattr(events, "_groups", lambda count: [[shard] for shard in range(count)])

    async def follow() -> list[str]:
        feed = EventFeed(poll=0.3)
        try:
            await feed.open(None)
            got: list[str] = []
            for shard in (2, 0, 1, 2):
                [task_id] = await asyncio.to_thread(enqueue_on, shard)
                for _ in range(20):
                    batch = await feed.next()
                    got += [e["task"] for e in batch.events if e["type"] == "TASK_SUBMITTED"]
                    if task_id in got:
                        break
            assert len(feed._clients) == SHARDS
            return got
        finally:
            await feed.close()

    got = asyncio.run(follow())
    assert len(got) == 4 and len(set(got)) == 4
    assert [ids.shard_of(t) for t in got] == [2, 0, 1, 2]


def test_the_queue_list_pages_within_the_read_budget_over_shards(sharded):
    for queue in ("tests", "other", "third"):
        enqueue_on(1, queue=queue)
    with read_budget(120) as budget:
        page = read_side.overview_page()
    assert budget.spent <= 120
    assert [q["name"] for q in page["queues"]] == ["other"]
    assert page["next_cursor"] == "other" and budget.partial


def test_a_position_of_another_shard_count_starts_from_now(sharded):
    spread(1)

    async def scenario() -> events.Batch:
        feed = EventFeed()
        try:
            return await feed.open("1-0")  # one stream id: a position of SHARDS=1
        finally:
            await feed.close()

    batch = asyncio.run(scenario())
    assert batch.events == [] and batch.last_id == events.latest_id()


# ----- the surfaces: admin, API, /metrics ---------------------------------------------------


def test_the_admin_overview_and_the_dlq_page_show_every_shard(sharded):
    spread(2)
    made = dead_everywhere(1)
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    operator = Client()
    operator.force_login(user)
    page = operator.get(reverse("admin:dtq_taskqueue_changelist")).content.decode()
    row = re.search(r'<tr data-queue="tests">.*?</tr>', page, re.S).group(0)
    assert re.search(rf'data-field="queued">{2 * SHARDS}<', row)
    response = operator.get(reverse("admin:dtq_taskqueue_dlq"), {"queue": "tests"})
    assert response.status_code == 200
    assert all(task_id in response.content.decode() for task_id in made)


def test_the_dashboard_reads_its_chart_once_and_fits_the_budget(sharded):
    sharded.configure(READ_BUDGET=500)  # the chart is 60 minutes x 3 shards = 180 commands
    for shard, queue in enumerate(("tests", "other", "third")):
        enqueue_on(shard, queue=queue)
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    operator = Client()
    operator.force_login(user)
    response = operator.get(reverse("admin:dtq_taskqueue_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert all(f'<tr data-queue="{q}">' in page for q in ("tests", "other", "third"))


def test_the_api_pages_the_dlq_over_every_shard_and_metrics_sum(sharded, api):  # noqa: F811
    made = dead_everywhere(2)
    client = api.client("view")
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/dlq/", params).json()
        seen += [e["task_id"] for e in page["results"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == len(made)
    [queue] = [q for q in client.get("/api/queues/").json()["results"] if q["name"] == "tests"]
    assert queue["dlq"] == len(made)
    metrics = client.get("/metrics").content.decode()
    assert f'dtq_queue_dlq{{queue="tests"}} {len(made)}' in metrics
