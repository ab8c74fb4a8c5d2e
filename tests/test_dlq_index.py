"""The DLQ index: a task's entry is found in O(1), and an unknown id costs no scan."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from django.urls import reverse

from dtq.engine import dlq, ops, read_side
from dtq.engine.reaper import Reaper
from tests.ops_support import ACTOR, dead_letter_by_hand, keys
from tests.test_api_support import api, assert_error  # noqa: F401
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)
CRAFTED = "0" * 22  # a valid id from time 0: the old lookup read every DLQ from the start


def dead(n: int, queue: str = "tests") -> list[str]:
    for i in range(n):
        tasks.record.using(queue_name=queue).enqueue(i)
    return dead_letter_by_hand(n, queue)


def commands(client: Any) -> dict[str, int]:
    """Return calls per command since the last CONFIG RESETSTAT (a private server only)."""
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    plumbing = ("hello", "info", "config", "client", "ping", "select")
    return {name: n for name, n in calls.items() if not name.startswith(plumbing)}


def index(client: Any) -> dict[str, str]:
    return client.hgetall(keys().dlq_index)


def test_every_way_out_of_the_dlq_leaves_the_index(dtq_env):
    replayed, discarded, kept, trimmed = dead(4)
    client = dtq_env.client
    assert set(index(client)) == {replayed, discarded, kept, trimmed}
    entry = read_side.find_dlq_entry(kept)
    assert index(client)[kept] == f"tests {entry['entry_id']}"
    ops.replay(replayed, actor=ACTOR)
    ops.discard(discarded, actor=ACTOR)
    assert set(index(client)) == {kept, trimmed}
    # Retention: only entries older than the cutoff go, with their index entries.
    cutoff = int(read_side.find_dlq_entry(kept)["entry_id"].split("-")[0])  # kept is older
    assert dlq.trim("tests", cutoff + 0) == 0  # nothing strictly older than kept
    dtq_env.configure(DLQ_RETENTION=1)  # the shortest the checks allow
    time.sleep(1.05)
    Reaper().apply_retention()
    assert index(client) == {} and read_side.dlq_entries("tests", 1)["total"] == 0


def test_an_entry_is_found_through_the_index_after_its_record_expired(dtq_env):
    (task_id,) = dead(1, "other")
    dtq_env.client.delete(keys().task(task_id))  # the record went past retention
    assert read_side.find_dlq_entry(task_id)["queue"] == "other"
    assert read_side.find_dlq_entry(task_id, "other")["task_id"] == task_id
    assert read_side.find_dlq_entry(task_id, "tests") is None
    assert ops.replay(task_id, actor=ACTOR) == "recreated"
    assert index(dtq_env.client) == {}


def test_a_task_dead_lettered_twice_is_indexed_at_its_newest_entry(dtq_env):
    (task_id,) = dead(1)
    ops.replay(task_id, actor=ACTOR)
    dead_letter_by_hand(1)
    newest = read_side.find_dlq_entry(task_id)["entry_id"]
    assert index(dtq_env.client) == {task_id: f"tests {newest}"}


def test_an_unknown_id_is_a_404_without_a_scan(dtq_env, private_redis, api):  # noqa: F811
    for queue in ("tests", "other", "third"):
        dead(600, queue)  # more than one page of the old scan per queue
    client = api.client("view")
    redis.Redis.from_url(private_redis.url).config_resetstat()
    assert_error(client.get(f"/api/dlq/{CRAFTED}/"), 404, "not_in_dlq")
    used = commands(redis.Redis.from_url(private_redis.url))
    assert "xrange" not in used, used
    assert sum(used.values()) <= 3, used


def test_the_admins_selected_entries_cost_a_few_commands_each(dtq_env, private_redis, admin_client):
    dead(600)
    redis.Redis.from_url(private_redis.url).config_resetstat()
    data = {"action": "discard", "queue": "tests", "confirm": "yes", "reason": "x"}
    data["task"] = [CRAFTED[:-3] + f"{i:03d}" for i in range(200)]
    response = admin_client.post(reverse("admin:dtq_taskqueue_dlq_action"), data)
    assert response.status_code == 302
    used = commands(redis.Redis.from_url(private_redis.url))
    assert used.get("xrange", 0) == 0, used
    assert read_side.dlq_entries("tests", 1)["total"] == 600
