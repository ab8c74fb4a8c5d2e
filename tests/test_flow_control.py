"""Flow control with real worker processes: concurrency limits, rates, per-key lines, crashes."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from typing import Any

import pytest

from dtq.engine import read_side
from dtq.engine.errors import InvalidTaskError
from dtq.engine.keys import BANDS, GROUP
from tests.conftest import wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def overlap(rows: list[dict[str, Any]]) -> int:
    """Return the most executions that ran at once, from start/end witness rows."""
    marks = sorted((r["t"], 1 if r["phase"] == "start" else -1) for r in rows)
    most = running = 0
    for _, step in sorted(marks, key=lambda m: (m[0], m[1])):  # an end before a start at a tie
        running += step
        most = max(most, running)
    return most


def finished(env: Any, n: int, task: str) -> bool:
    return len([r for r in env.witnessed(task) if r.get("phase", "end") == "end"]) >= n


def limit_keys_empty(env: Any, queue: str = "tests") -> bool:
    client, keys = env.client, env.keys
    return client.zcard(keys.limit_held(queue)) == 0 and client.zcard(keys.limit_wait(queue)) == 0


def test_max_concurrency_holds_across_three_workers(dtq_env: Any) -> None:
    results = [tasks.pair_limited.enqueue(0.15) for _ in range(18)]
    for _ in range(3):
        dtq_env.worker("--concurrency", "4")
    wait_for(lambda: finished(dtq_env, 18, "pair_limited"), timeout=60)
    rows = dtq_env.witnessed("pair_limited")
    assert overlap(rows) == 2  # the limit was reached, never passed
    assert len({r["pid"] for r in rows}) >= 2  # the limit held across processes
    for result in results:
        wait_for(lambda r=result: r.refresh() or r.state == "SUCCEEDED")
        assert result.attempt == 1  # waiting for a slot is not an attempt
    assert dtq_env.stats()["limit_waits"] > 0
    wait_for(lambda: limit_keys_empty(dtq_env))


def most_in_one_second(times: list[float]) -> int:
    """Return the most of these instants (seconds) that fall in any 1-second window."""
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < s + 1.0) for i, s in enumerate(times))


def test_rate_limit_holds_in_every_one_second_window(dtq_env: Any) -> None:
    # 20 s of work at 20/s, as the issue asks; bounded by the wait below.
    n = 400
    tasks.rated.using().enqueue_many([((), {}) for _ in range(n)])
    dtq_env.worker("--concurrency", "8", "--with-scheduler")  # it promotes refused tasks
    for _ in range(2):
        dtq_env.worker("--concurrency", "8")
    wait_for(lambda: len(dtq_env.witnessed("rated")) >= n, timeout=60)
    # The limit is enforced where an attempt starts: the claim, by Redis' clock.
    claims = [e["ts"] / 1000 for e in dtq_env.events("TASK_STARTED")]
    assert len(claims) == n
    burst = 1  # the documented default burst
    assert most_in_one_second(claims) <= 20 + burst - 1  # spaced 50 ms: 20 per second
    claims.sort()
    assert claims[-1] - claims[0] >= (n - 21) / 20  # paced, not run in one go
    assert claims[-1] - claims[0] < n / 20 * 1.5 + 3  # and not much slower than the rate
    # Handlers start a little after their claim; on a loaded machine that delay varies.
    starts = [r["t"] for r in dtq_env.witnessed("rated")]
    assert most_in_one_second(starts) <= 20 + burst + 2


def run_per_customer(env: Any, workers: int) -> dict[str, list[dict[str, Any]]]:
    """Run 6 tasks for each of 3 customers on `workers` workers; return the witness rows."""
    calls = [((c, seq, 0.05), {}) for seq in range(6) for c in ("acme", "globex", "initech")]
    tasks.per_customer.enqueue_many(calls)
    for _ in range(workers):
        env.worker("--concurrency", "4")
    wait_for(lambda: finished(env, len(calls), "per_customer"), timeout=60)
    by_customer: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in env.witnessed("per_customer"):
        by_customer[row["customer"]].append(row)
    assert overlap(env.witnessed("per_customer")) > 1  # different customers ran together
    wait_for(lambda: limit_keys_empty(env))
    return by_customer


def test_per_key_lines_run_one_at_a_time_across_workers(dtq_env: Any) -> None:
    for rows in run_per_customer(dtq_env, workers=3).values():
        assert overlap(rows) == 1
        assert sorted(r["seq"] for r in rows if r["phase"] == "start") == list(range(6))


def test_per_key_lines_keep_submission_order_with_one_worker(dtq_env: Any) -> None:
    # Two workers may claim entries they read at the same moment in either order, so the
    # order across workers is the order of the claims (docs/flow-control.md, "Order").
    for rows in run_per_customer(dtq_env, workers=1).values():
        assert overlap(rows) == 1
        assert [r["seq"] for r in rows if r["phase"] == "start"] == list(range(6))


def test_a_killed_worker_frees_its_slots_within_one_lease(dtq_env: Any) -> None:
    dtq_env.configure(HEARTBEAT_INTERVAL=0.2, LEASE_TIMEOUT=1.5, REAPER_INTERVAL=0.2)
    first = [tasks.pair_limited.enqueue(30) for _ in range(2)]  # hold both slots for long
    victim = dtq_env.worker("--concurrency", "4")
    wait_for(lambda: len(dtq_env.witnessed("pair_limited")) == 2)
    later = [tasks.pair_limited.enqueue(0.05) for _ in range(4)]
    line = dtq_env.keys_of(later[0].id)  # a limit line's tasks share one shard
    wait_for(lambda: dtq_env.client_of(line).zcard(line.limit_wait("tests")) == 4)
    # The rescuer (a worker and a reaper) is up before the kill: its start-up is not timed.
    dtq_env.worker("--concurrency", "4", "--with-reaper")
    wait_for(lambda: dtq_env.client.zcard(dtq_env.keys.workers) == 2, timeout=30)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    killed_at = time.time()
    # The dead worker's attempts are reclaimed when their lease runs out; their slots pass
    # on to the waiting tasks (first in line), which all run before the reclaimed ones.
    wait_for(lambda: finished(dtq_env, 4, "pair_limited"), timeout=30)
    ends = [r["t"] for r in dtq_env.witnessed("pair_limited") if r["phase"] == "end"]
    assert min(ends) - killed_at < 1.5 + 2.5  # one lease, plus a reaper pass and a claim
    for result in later:
        wait_for(lambda r=result: r.refresh() or r.state == "SUCCEEDED")
    for result in first:
        wait_for(lambda r=result: r.refresh() or r.attempt == 2)  # reclaimed, run again


def test_waiting_task_says_why_and_cancel_hands_on_its_slot(dtq_env: Any) -> None:
    first = tasks.per_customer.enqueue("acme", 0, 30)
    waiting = tasks.per_customer.enqueue("acme", 1, 0)
    third = tasks.per_customer.enqueue("acme", 2, 0)
    dtq_env.worker("--concurrency", "4")
    wait_for(lambda: len(dtq_env.witnessed("per_customer")) == 1)
    detail = wait_for(lambda: (read_side.get_task(waiting.id) or {}).get("waiting"))
    assert detail.startswith("waiting: concurrency 1/1 on task tests.testapp.tasks.per_customer")
    assert "key acme" in detail
    from dtq.engine import ops
    from dtq.engine.audit import Actor

    actor = Actor.command()
    ops.cancel(waiting.id, actor=actor)  # leaves the line; the third keeps waiting
    ops.cancel(first.id, actor=actor)
    # The running task ignores a cancel request (it sleeps): kill it instead of waiting.
    assert third.refresh() is None or third.state == "QUEUED"
    dtq_env.stop_all()
    dtq_env.configure(HEARTBEAT_INTERVAL=0.2, LEASE_TIMEOUT=1.0, REAPER_INTERVAL=0.2)
    dtq_env.worker("--concurrency", "4", "--with-reaper")
    wait_for(lambda: third.refresh() or third.state == "SUCCEEDED", timeout=30)
    wait_for(lambda: limit_keys_empty(dtq_env))


def test_bad_limits_are_refused_with_a_clear_error() -> None:
    import dtq

    cases = [
        ({"rate_limit": "10/x"}, "invalid rate '10/x'"),
        ({"rate_limit": "0/s"}, "count must be in"),
        ({"max_concurrency": -1}, "max_concurrency must be an int in 1.."),
        ({"max_concurrency": 1, "concurrency_key": "no such"}, "must name an argument"),
        ({"concurrency_key": "x"}, "needs max_concurrency or rate_limit"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidTaskError, match=message):
            dtq.task(name=f"bad.{len(message)}", **options)(lambda x: x)


def test_a_call_without_the_key_argument_is_refused() -> None:
    with pytest.raises(InvalidTaskError, match="concurrency_key 'customer'"):
        tasks.per_customer.enqueue(customer=None, seq=0, seconds=0)  # type: ignore[arg-type]


def pending_entries(env: Any, queue: str) -> int:
    return sum(
        int(env.client.xpending(env.keys.stream(queue, band), GROUP)["pending"])
        for band in BANDS
        if env.client.exists(env.keys.stream(queue, band))
    )


def test_django_tasks_take_the_limit_options(dtq_env: Any) -> None:
    from dtq.compat import TASK_TAKES_OPTIONS

    if not TASK_TAKES_OPTIONS:
        pytest.skip("this Django's @task passes no options to the backend's task class")
    from tests.testapp import django_tasks

    first = django_tasks.dj_serialized.enqueue("a1", 0)
    second = django_tasks.dj_serialized.enqueue(account="a1", seq=1)
    task_keys = dtq_env.keys_of(second.id)
    record = dtq_env.client_of(task_keys).hgetall(task_keys.task(second.id))
    assert record["lim"] == "1||||a1"
    dtq_env.worker("--concurrency", "4")
    wait_for(lambda: len(dtq_env.witnessed("dj_serialized")) == 2)
    assert [r["seq"] for r in dtq_env.witnessed("dj_serialized")] == [0, 1]
    assert first.id != second.id
    from dtq.compat import InvalidTask, task

    with pytest.raises(InvalidTask, match="invalid rate '3/x'"):
        task(queue_name="tests", rate_limit="3/x")(badly_limited)


def badly_limited() -> None:
    """A module-level function (django.tasks wants one) given a bad rate in a test."""
