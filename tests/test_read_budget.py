"""The read budget: no read request costs Redis more than 2,000 commands, whatever the data.

The data is built through the real scripts in pipelined bulk (submit, read, claim, finalize)
on a private Redis server, so INFO commandstats counts only what each request sends.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dtq.engine import codec, layout, read_side
from dtq.engine.connection import get_client
from dtq.engine.submit import Submission, submit_many
from tests.ops_support import claim_by_hand, keys
from tests.script_calls import Scripts
from tests.test_api_support import RECORD, api  # noqa: F401

pytestmark = pytest.mark.django_db

QUEUES = [f"q{n:03d}" for n in range(300)]
HOT, DEAD = "q000", "q001"  # the queue holding most tasks, the one with the big DLQ
TASKS = 100_000
DLQ_ENTRIES = 30_000
SUCCEEDED = 10_000
WORKERS = 300
COMMAND_LIMIT = 2000


def commands(client: Any) -> int:
    """Return how many commands the server ran so far, not counting INFO itself."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def submit_bulk(queue: str, n: int, chunk: int = 5000) -> None:
    """Submit n `record` tasks to queue through submit.lua, pipelined."""
    for start in range(0, n, chunk):
        subs = [
            Submission(name=RECORD, queue=queue, args=[i], priority=(i % 3 - 1) * 50)
            for i in range(start, min(start + chunk, n))
        ]
        assert not [r for r in submit_many(subs) if isinstance(r, Exception)]


def finish_bulk(queue: str, n: int, outcome: str, batch: int = 1000) -> None:
    """Claim n queued tasks of queue and record `outcome` for them, batch by batch."""
    scripts = Scripts.of(get_client())
    data = codec.dumps({"class": "builtins.ValueError", "message": "bulk"})
    for _ in range(0, n, batch):
        claimed = claim_by_hand(queue, batch, worker="bulk")
        refs = [layout.TaskRef(c["id"], queue, c["idem"]) for c in claimed]
        k, argv = layout.build(keys(), [queue], refs, layout=layout.of("finalize"))
        args: list[Any] = []
        for c in claimed:
            history = codec.dumps({"attempt": c["attempt"], "outcome": outcome})
            args += [1, c["band"], c["entry"], c["attempt"], outcome, data, history, 0]
        applied = scripts.finalize(keys=k, args=[*argv, "1", "bulk", *args])
        assert sum(1 for state in applied[::2] if state) == len(claimed)


def fake_fleet(client: Any) -> None:
    """Register WORKERS workers and as many reaper processes, shaped like real heartbeats."""
    k = keys()
    pipe = client.pipeline(transaction=False)
    now = client.time()[0]
    for n in range(WORKERS):
        worker = f"w{n:03d}"
        pipe.zadd(k.workers, {worker: now - n})
        pipe.hset(k.worker(worker), mapping={"host": "h", "pid": n, "queues": '["q000"]'})
        pipe.zadd(k.processes("reaper"), {f"p{n}": now - n})
    pipe.execute()


@pytest.fixture
def big(dtq_env, private_redis) -> dict[str, Any]:
    """300 queues, 100,000 tasks in every state, a 30,000-entry DLQ, 300 workers."""
    dtq_env.configure(READ_BUDGET=1000, QUEUES=["default", *QUEUES])
    for queue in QUEUES[2:]:
        submit_bulk(queue, 10)
    submit_bulk(DEAD, DLQ_ENTRIES)
    submit_bulk(HOT, TASKS - DLQ_ENTRIES - 10 * (len(QUEUES) - 2))
    finish_bulk(DEAD, DLQ_ENTRIES, "fail")
    finish_bulk(HOT, SUCCEEDED, "success")
    claim_by_hand(HOT, 50, worker="busy")  # some RUNNING
    fake_fleet(dtq_env.client)
    assert len(read_side.queue_names()) == len(QUEUES)
    assert read_side.queue_overview(DEAD)["dlq"] == DLQ_ENTRIES
    hot = read_side.list_tasks(HOT, "SUCCEEDED", limit=1)["tasks"][0]
    dead = read_side.list_tasks(DEAD, "DEAD_LETTERED", limit=1)["tasks"][0]
    return {"hot_task": hot["id"], "dead_task": dead["id"]}


def _api_paths(big: dict[str, Any]) -> list[str]:
    hot, dead = big["hot_task"], big["dead_task"]
    return [
        "/api/tasks/?limit=1000&task=nope",
        "/api/tasks/?limit=1000",
        "/api/tasks/?limit=1000&state=QUEUED",
        "/api/tasks/?limit=1000&state=QUEUED&task=nope",
        f"/api/tasks/?limit=1000&queue={HOT}",
        f"/api/tasks/?limit=1000&queue={HOT}&task=nope",
        f"/api/tasks/?limit=1000&queue={HOT}&created_before=2001-01-01T00:00:00Z",
        f"/api/tasks/?limit=1000&queue={HOT}&created_after=2001-01-01T00:00:00Z&task=nope",
        "/api/tasks/?limit=1000&cursor=99999999999999:" + hot,
        "/api/tasks/?limit=1000&q=args.0%3D42",
        "/api/tasks/?limit=1000&q=state%3AFAILED+kwargs.user_id%3D42",
        "/api/tasks/?limit=1000&q=error%3Abulk+kwargs~x+worker%3Abusy+attempt%3E%3D1",
        f"/api/tasks/?limit=1000&q=queue%3A{HOT}+started%3E-1h+finished%3C-0s",
        f"/api/tasks/{hot}/",
        "/api/queues/?limit=1000",
        f"/api/queues/{HOT}/?minutes=120",
        "/api/dlq/?limit=1000",
        f"/api/dlq/?limit=1000&queue={DEAD}",
        f"/api/dlq/{dead}/",
        "/api/workers/",
        "/api/workers/w000/",
        "/api/ready/",
        "/metrics",
        "/metrics?after=q100",
    ]


def _admin_paths(big: dict[str, Any]) -> list[str]:
    def admin(name: str, *args: str) -> str:
        return reverse(f"admin:dtq_taskqueue_{name}", args=args)

    return [
        admin("changelist"),
        admin("changelist") + "?after=q100",
        admin("overview_live"),
        admin("tasks"),
        admin("tasks") + f"?queue={HOT}&task=nope",
        admin("tasks") + f"?queue={HOT}&state=SUCCEEDED",
        admin("tasks") + "?q=args.0%3D42",
        admin("tasks") + "?q=error%3Abulk+state%3ADEAD_LETTERED",
        admin("run"),
        admin("task", big["hot_task"]),
        admin("task_edit", big["dead_task"]),
        admin("workers"),
        admin("worker", "w000"),
        admin("dlq") + f"?queue={DEAD}",
        admin("dlq") + f"?queue={DEAD}&name=nope",
    ]


def test_no_read_request_costs_more_than_2000_commands(big, api, dtq_env):  # noqa: F811
    client = dtq_env.client
    viewer = api.client("view")
    staff = User.objects.create(username="viewer", is_staff=True)
    staff.user_permissions.set(api.user("view", "submit", "replay").user_permissions.all())
    admin_client = Client()
    admin_client.force_login(staff)
    costs: dict[str, int] = {}
    for path in _api_paths(big):
        before = commands(client)
        response = viewer.get(path)
        costs[path] = commands(client) - before
        expected = 503 if path == "/api/ready/" else 200  # no live scheduler or reaper here
        assert response.status_code == expected, (path, response.content[:300])
    for path in _admin_paths(big):
        before = commands(client)
        response = admin_client.get(path)
        costs[path] = commands(client) - before
        assert response.status_code == 200, (path, response.content[:300])
    for args in (["--json"], [], ["--after", "q100"]):
        before = commands(client)
        call_command("dtq_status", *args, stdout=io.StringIO())
        costs["dtq_status " + " ".join(args)] = commands(client) - before
    worst = max(costs, key=lambda p: costs[p])
    print("\n".join(f"{n:6d}  {p}" for p, n in sorted(costs.items(), key=lambda x: -x[1])))
    assert costs[worst] <= COMMAND_LIMIT, (worst, costs[worst])

    workers = viewer.get("/api/workers/")
    assert len(workers.json()["results"]) == 200 and workers["X-DTQ-Partial"] == "true"
    assert "X-DTQ-Partial" not in viewer.get(f"/api/tasks/{big['hot_task']}/")

    # A filter without an index reads what the budget pays for and says the page is partial.
    page = viewer.get(f"/api/tasks/?limit=1000&queue={HOT}&task=nope").json()
    assert page["results"] == []
    assert page["partial"] is True
    assert 0 < page["scanned"] <= 1000
    assert page["next_cursor"]  # the scan goes on from there on the next request
    queues = viewer.get("/api/queues/?limit=1000").json()
    assert queues["total"] == len(QUEUES)
    assert 0 < len(queues["results"]) < len(QUEUES)
    assert queues["next_cursor"] == queues["results"][-1]["name"]


def _all_pages(read: Any) -> list[Any]:
    items, cursor, pages = [], None, 0
    while True:
        page = read(cursor)
        items += page[0]
        cursor, pages = page[1], pages + 1
        assert pages < 200, "paging does not progress"
        if cursor is None:
            return items


def test_pages_over_several_queues_give_every_task_once_newest_first(dtq_env):
    dtq_env.configure(READ_BUDGET=120)
    for n, queue in enumerate(("qa", "qb", "qc")):
        submit_bulk(queue, 15 + 10 * n, chunk=7)  # 75 tasks in several milliseconds
    finish_bulk("qb", 12, "success", batch=5)
    expected = sorted(
        (int(score), task_id)
        for queue in ("qa", "qb", "qc")
        for state in ("QUEUED", "SUCCEEDED")
        for task_id, score in dtq_env.client.zrange(
            dtq_env.keys.index(queue, state), 0, -1, withscores=True
        )
    )[::-1]

    def read(cursor: str | None) -> tuple[list[str], str | None]:
        page = read_side.search_tasks(["qa", "qb", "qc"], limit=9, cursor=cursor)
        return [t["id"] for t in page["tasks"]], page["next_cursor"]

    assert _all_pages(read) == [task_id for _, task_id in expected]

    def named(cursor: str | None) -> tuple[list[str], str | None]:
        page = read_side.search_tasks(["qa", "qb", "qc"], limit=5, cursor=cursor, name="nope")
        assert page["tasks"] == [] and page["scanned"] <= 120
        return [], page["next_cursor"]

    _all_pages(named)  # a filter that matches nothing still reaches the end, page by page


def test_dlq_pages_over_several_queues_give_every_entry_once(dtq_env):
    dtq_env.configure(READ_BUDGET=100)  # the least the checks allow
    for queue, n in (("qa", 7), ("qb", 12), ("qc", 3)):
        submit_bulk(queue, n)
        finish_bulk(queue, n, "fail", batch=4)

    def read(cursor: str | None) -> tuple[list[str], str | None]:
        page = read_side.search_dlq(["qa", "qb", "qc"], limit=4, before=cursor)
        assert page["total"] == 22
        return [e["task_id"] for e in page["entries"]], page["next_cursor"]

    found = _all_pages(read)
    assert len(found) == len(set(found)) == 22


def test_reads_are_throttled_per_user_in_the_dtq_read_scope(api, dtq_env):  # noqa: F811
    dtq_env.configure(API_READ_THROTTLE="3/minute")
    viewer, other = api.client("view"), api.client("view")
    assert [viewer.get("/api/queues/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert viewer.get("/api/tasks/").status_code == 429  # one scope for every read
    assert other.get("/api/queues/").status_code == 200  # per user
    assert viewer.get("/api/health/").status_code == 200  # probes are never throttled


def test_the_dashboard_pages_its_queues(api, dtq_env):  # noqa: F811
    names = [f"page{n:02d}" for n in range(30)]
    dtq_env.configure(QUEUES=["default", *names])
    for queue in names:
        submit_bulk(queue, 1)
    staff = Client()
    staff.force_login(api.user("view", is_staff=True))
    url = reverse("admin:dtq_taskqueue_changelist")
    first = staff.get(url).content.decode()
    assert 'data-queue="page24"' in first and 'data-queue="page25"' not in first
    assert "25 of 30 queues" in first and "?after=page24" in first
    second = staff.get(url + "?after=page24").content.decode()
    assert 'data-queue="page25"' in second and 'data-queue="page24"' not in second
    assert "live/?after=page24" in second  # the live refresh keeps the page


def test_dlq_pages_keep_entries_of_two_queues_with_the_same_id(dtq_env):
    # Entry ids are unique per stream only: a cursor of an id alone would skip the twin.
    for queue in ("qa", "qb"):
        for entry_id in ("1000-0", "2000-0"):
            dtq_env.client.xadd(
                dtq_env.keys.dlq(queue), {"t": f"{queue}{entry_id}", "name": RECORD}, id=entry_id
            )

    def read(cursor: str | None) -> tuple[list[str], str | None]:
        page = read_side.search_dlq(["qa", "qb"], limit=1, before=cursor)
        return [e["task_id"] for e in page["entries"]], page["next_cursor"]

    found = _all_pages(read)
    assert sorted(found) == ["qa1000-0", "qa2000-0", "qb1000-0", "qb2000-0"]
