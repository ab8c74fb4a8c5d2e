"""The offline checker catches what it claims to: a healthy synthetic run passes, and each
planted violation fails exactly the invariant meant to catch it (no Redis, no processes)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from dtq.engine.cron import Timing
from tests.chaos import model
from tests.chaos.check import counters_agree, in_its_shard, run_checks
from tests.chaos.config import PERIODIC

T0 = 1_000_000.0
A, B = "a" * 22, "b" * 22


def row(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "t": t, **fields}


def witness(task: str, attempt: int, pid: int, start: float, outcome: str | None) -> list[Any]:
    rows = [{"id": task, "attempt": attempt, "pid": pid, "ev": "start", "t": start, "cls": "x"}]
    if outcome:
        rows.append(
            {
                "id": task,
                "attempt": attempt,
                "pid": pid,
                "ev": "end",
                "t": start + 0.01,
                "outcome": outcome,
            }
        )
    return rows


def record(task: str, name: str, state: str, attempt: int, finished: float) -> dict[str, Any]:
    return {
        "id": task,
        "name": name,
        "state": state,
        "attempt": str(attempt),
        "max_attempts": "3",
        "created_at": str(int(T0 * 1000)),
        "finished_at": str(int(finished * 1000)),
        "history": [],
        "error": None,
    }


def claimed(task: str, attempt: int, t: float) -> list[Any]:
    """A TASK_STARTED event of the snapshot (Redis time in ms): the claim of an attempt."""
    return ["TASK_STARTED", task, attempt, "RUNNING", int(t * 1000)]


PAUSED_MS = int((T0 + 5) * 1000)


def ticks() -> list[dict[str, Any]]:
    """Witness rows of every periodic slot from T0 to the pause, each fired once."""
    rows = []
    for name, (cron, every, zone) in PERIODIC.items():
        timing = Timing.of(cron, timedelta(seconds=every) if every else None, zone)
        for i, slot in enumerate(timing.slots(int(T0 * 1000), PAUSED_MS - 1500, 100)):
            tid = f"{name}-{i}".ljust(22, "x")
            start = slot / 1000 + 0.01
            rows.append(
                {"id": tid, "attempt": 1, "pid": 11, "ev": "start", "t": start, "cls": "tick"}
                | {"schedule": name, "slot": slot}
            )
            rows.append(
                {"id": tid, "attempt": 1, "pid": 11, "ev": "end", "t": start + 0.001}
                | {"outcome": "success"}
            )
    return rows


def healthy() -> dict[str, Any]:
    """A tiny run: one ordinary task that succeeded, one poison task dead-lettered, and the
    periodic schedules firing every slot once until they are paused after the heal."""
    return {
        "config": {"seed": 1},
        "prefix": "p",
        "planned_faults": [],
        "events": [
            row("spawn", T0 - 1, slot="worker-0", role="worker", pid=11),
            row("phase", T0, phase="load"),
            row("phase", T0 + 5, phase="load_end"),
            row("phase", T0 + 5, phase="heal"),
            row("periodic_paused", T0 + 5, redis_ms=PAUSED_MS, settle=7.0),
            row("phase", T0 + 6, phase="drained"),
        ],
        "submissions": [
            row("submit", T0, result="ok", id=A, cls="ordinary", max_attempts=3),
            row("submit", T0, result="ok", id=B, cls="poison", max_attempts=3),
        ],
        "cancels": [],
        "witness": witness(A, 1, 11, T0 + 0.1, "success")
        + [w for n in (1, 2, 3) for w in witness(B, n, 11, T0 + n, "error")]
        + ticks(),
        "snapshot": {
            "appendfsync": "always",
            "records": {
                A: record(A, "chaos.ordinary", "SUCCEEDED", 1, T0 + 0.2),
                B: record(B, "chaos.poison", "DEAD_LETTERED", 3, T0 + 3.1),
            },
            "indexes": {"SUCCEEDED": [A], "DEAD_LETTERED": [B]},
            "events": [
                claimed(A, 1, T0 + 0.09),
                *(claimed(B, n, T0 + n - 0.01) for n in (1, 2, 3)),
                ["TASK_SUCCEEDED", A, 1, "SUCCEEDED", 0],
                ["TASK_DEAD_LETTERED", B, 3, "DEAD_LETTERED", 0],
            ],
            "dlq": [{"entry": "1-0", "task": B}],
            "stats": {"submitted": 2, "succeeded": 1, "dead_lettered": 1, "active": 0},
            "leftovers": {"running": 0, "schedule": 0, "pending": 0},
            "schedule": [],
            "running": [],
            "idempotency": {},
        },
    }


def failures(raw: dict[str, Any]) -> list[str]:
    data = model.RunData(**raw)
    model.index(data)
    return [c.name for c in run_checks(data) if not c.ok]


def test_a_healthy_run_passes() -> None:
    assert failures(healthy()) == []


def rerun_a(raw: dict[str, Any]) -> None:
    raw["witness"] += witness(A, 2, 12, T0 + 0.15, "success")


def kill_pid_11(raw: dict[str, Any]) -> None:
    raw["events"].append(
        row("signal", T0 + 0.12, slot="worker-0", role="worker", pid=11, signal="SIGKILL")
    )


def lose_a(raw: dict[str, Any]) -> None:
    del raw["snapshot"]["records"][A]


def second_terminal_event(raw: dict[str, Any]) -> None:
    raw["snapshot"]["events"].append(["TASK_SUCCEEDED", A, 1, "SUCCEEDED", 0])


def run_after_completion(raw: dict[str, Any]) -> None:
    raw["witness"] += witness(A, 2, 11, T0 + 4, "success")


def run_attempt_twice(raw: dict[str, Any]) -> None:
    raw["witness"] += witness(B, 3, 12, T0 + 3.05, "error")


def extra_dlq_entry(raw: dict[str, Any]) -> None:
    raw["snapshot"]["dlq"].append({"entry": "2-0", "task": B})


def exceed_attempts(raw: dict[str, Any]) -> None:
    raw["witness"] += witness(B, 4, 11, T0 + 3.05, "error")


def leave_pending(raw: dict[str, Any]) -> None:
    raw["snapshot"]["leftovers"]["pending"] = 1


def count_twice(raw: dict[str, Any]) -> None:
    raw["snapshot"]["stats"]["submitted"] = 3


def unexplained_reclaim(raw: dict[str, Any]) -> None:
    raw["snapshot"]["records"][A]["history"] = [
        {
            "attempt": 1,
            "worker": "host.11.abc",
            "outcome": "lost",
            "started_at": T0 + 0.1,
            "ended_at": T0 + 3.2,
        }
    ]


def freeze_pid_11(raw: dict[str, Any], at: float, seconds: float) -> None:
    """A failpoint freeze of pid 11 (what the worker_freeze fault logs)."""
    raw["freezes"] = [{"t": at, "pid": 11, "point": "worker.before_handler@1", "seconds": seconds}]


def start_after_the_lease(raw: dict[str, Any]) -> None:
    # Claimed 4 s before its handler started (lease 3 s), the worker frozen in between.
    events = raw["snapshot"]["events"]
    events[0] = claimed(A, 1, T0 - 3.9)
    freeze_pid_11(raw, T0 - 3.89, 3.95)


def zombie_start_after_success(raw: dict[str, Any]) -> None:
    # Issue #12: attempt 1 claimed by pid 11, which froze for 5 s before its handler began;
    # the reaper took it back, attempt 2 succeeded on pid 12, then pid 11 started attempt 1.
    raw["events"].append(row("spawn", T0 - 1, slot="worker-1", role="worker", pid=12))
    freeze_pid_11(raw, T0 + 0.06, 5.0)
    rec = raw["snapshot"]["records"][A]
    rec.update(attempt="2", finished_at=str(int((T0 + 3.3) * 1000)))
    rec["history"] = [
        {"attempt": 1, "worker": "host.11.abc", "outcome": "lost", "started_at": T0 + 0.05}
        | {"ended_at": T0 + 3.1},
        {"attempt": 2, "worker": "host.12.abc", "outcome": "succeeded", "started_at": T0 + 3.15},
    ]
    raw["snapshot"]["events"][0] = claimed(A, 1, T0 + 0.05)
    raw["snapshot"]["events"].append(claimed(A, 2, T0 + 3.15))
    raw["witness"] = [w for w in raw["witness"] if w["id"] != A]
    raw["witness"] += witness(A, 2, 12, T0 + 3.2, "success") + witness(A, 1, 11, T0 + 5.1, None)
    raw["witness"].sort(key=lambda w: w["t"])


def miss_a_slot(raw: dict[str, Any]) -> None:
    slot = next(r["slot"] for r in raw["witness"] if r.get("schedule") == "chaos-cron")
    raw["witness"] = [r for r in raw["witness"] if r.get("slot") != slot or r["cls"] != "tick"]


def fire_a_slot_twice(raw: dict[str, Any]) -> None:
    first = next(r for r in raw["witness"] if r.get("schedule") == "chaos-tick")
    raw["witness"].append({**first, "id": "d" * 22, "t": first["t"] + 0.5})


PERIODIC_CHECK = "periodic: each slot fired once (double = 0, missed = 0)"


@pytest.mark.parametrize(
    ("plant", "caught_by"),
    [
        (rerun_a, ["duplicates explained by a fault (unexplained = 0)"]),
        (lose_a, ["lost = 0", "counters agree with records"]),
        (second_terminal_event, ["exactly one terminal state"]),
        (
            run_after_completion,
            ["no execution after completion", "duplicates explained by a fault (unexplained = 0)"],
        ),
        (
            run_attempt_twice,
            [
                "each attempt executed at most once",
                "duplicates explained by a fault (unexplained = 0)",
            ],
        ),
        (extra_dlq_entry, ["DLQ = poison + crashers + exhausted"]),
        (exceed_attempts, ["attempts <= max_attempts"]),
        (leave_pending, ["nothing pending or orphaned"]),
        (count_twice, ["counters agree with records"]),
        (unexplained_reclaim, ["every reclaimed attempt explained by a fault"]),
        (start_after_the_lease, ["no handler starts after its lease ran out"]),
        (
            zombie_start_after_success,
            [
                "no execution after completion",
                "no handler starts after its lease ran out",
                "duplicates explained by a fault (unexplained = 0)",
            ],
        ),
        (miss_a_slot, [PERIODIC_CHECK]),
        (fire_a_slot_twice, [PERIODIC_CHECK]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_each_planted_violation_is_caught(plant: Any, caught_by: list[str]) -> None:
    raw = copy.deepcopy(healthy())
    plant(raw)
    assert failures(raw) == caught_by


def test_a_rerun_after_a_kill_of_its_process_is_explained() -> None:
    raw = copy.deepcopy(healthy())
    rerun_a(raw)
    kill_pid_11(raw)
    assert failures(raw) == []


def primary_killed(raw: dict[str, Any], at: float) -> None:
    """A failover: the primary SIGKILLed at `at`, a replica promoted 0.5 s later."""
    raw["events"] += [row("primary_kill", at, port=1), row("promoted", at + 0.5, port=2)]


def rerun_a_after(raw: dict[str, Any], at: float, attempt: int) -> None:
    """A runs again at `at` on another worker (its record finishing after that)."""
    raw["witness"] += witness(A, attempt, 12, at, "success")
    raw["snapshot"]["records"][A]["finished_at"] = str(int((at + 0.05) * 1000))


@pytest.mark.parametrize("attempt", [1, 2])  # claim lost (same attempt) or outcome lost
def test_a_primary_kill_explains_a_rerun_only_within_the_replication_window(attempt: int) -> None:
    # A's handler ended at T0 + 0.11; a kill 0.39 s later may have lost its outcome (or, when
    # A started 0.4 s before it, its claim) on the promoted replica.
    raw = copy.deepcopy(healthy())
    rerun_a_after(raw, T0 + 1.4, attempt)
    primary_killed(raw, T0 + 0.5)
    assert failures(raw) == []
    # 1.19 s after the handler ended (and 1.2 s after its claim), nothing of A's was unreplicated.
    raw = copy.deepcopy(healthy())
    rerun_a_after(raw, T0 + 1.4, attempt)
    primary_killed(raw, T0 + 1.3)
    caught = ["duplicates explained by a fault (unexplained = 0)"]
    if attempt == 1:
        caught.insert(0, "each attempt executed at most once")
    assert failures(raw) == caught


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_primary_kill_explains_only_reruns_of_the_shards_it_held(attempt: int) -> None:
    # A's record is in shard 1; a kill of the primary of shards 0 and 2 explains nothing of A's.
    raw = copy.deepcopy(healthy())
    raw["snapshot"]["records"][A]["shard"] = 1
    rerun_a_after(raw, T0 + 1.4, attempt)
    primary_killed(raw, T0 + 0.5)
    unexplained = "duplicates explained by a fault (unexplained = 0)"
    raw["events"][-2]["shards"] = [0, 2]
    assert unexplained in failures(raw)
    raw["events"][-2]["shards"] = [1]
    assert unexplained not in failures(raw)


def test_a_worker_silent_after_a_failover_fails() -> None:
    raw = copy.deepcopy(healthy())
    primary_killed(raw, T0 + 3.2)  # pid 11 runs nothing after T0 + 3.7, and lives on
    assert failures(raw) == ["workers resume after Redis restarts and failovers"]


def test_an_attempt_given_back_and_claimed_again_is_measured_from_its_last_claim() -> None:
    raw = copy.deepcopy(healthy())
    raw["snapshot"]["events"].insert(0, claimed(A, 1, T0 - 10))  # skipped, given back
    assert failures(raw) == []


def test_a_failpoint_freeze_explains_the_reclaim_it_caused() -> None:
    raw = copy.deepcopy(healthy())
    unexplained_reclaim(raw)
    freeze_pid_11(raw, T0 + 0.2, 3.5)
    assert failures(raw) == []


def test_limit_held_catches_one_run_too_many_but_not_a_frozen_worker() -> None:
    from tests.chaos.check import limit_held

    def run(*spans: tuple[str, int, float, float | None]) -> model.RunData:
        data = model.RunData({}, "p", [], [], [], [], [], {"leftovers": {"limit_waiting": 0}})
        for tid, pid, start, end in spans:
            ex = model.Execution(tid, 1, pid, start, "limited", end=end)
            data.executions.setdefault(tid, []).append(ex)
        return data

    three = run(("t1", 1, T0, T0 + 1), ("t2", 2, T0 + 0.1, T0 + 1), ("t3", 3, T0 + 0.2, T0 + 1))
    assert not limit_held(three).ok
    in_turn = run(("t1", 1, T0, T0 + 1), ("t2", 2, T0 + 0.1, T0 + 1), ("t3", 3, T0 + 1, T0 + 2))
    assert limit_held(in_turn).ok
    # Worker 1 froze at T0 + 0.5: its attempt's slot went to t3, which is not an overlap.
    frozen = run(("t1", 1, T0, T0 + 5), ("t2", 2, T0 + 0.1, T0 + 1), ("t3", 3, T0 + 0.6, T0 + 1))
    frozen.process_faults.append(model.ProcessFault(T0 + 0.5, "pause", 1, "w1", "worker"))
    assert limit_held(frozen).ok
    # Worker 1 froze itself at a failpoint, logged 3 ms before a handler on another of its
    # threads began (the SIGSTOP lands after the log): that run stopped as it began.
    racing = run(("t1", 1, T0, T0 + 5), ("t2", 2, T0 + 0.1, T0 + 1), ("t3", 3, T0 + 0.6, T0 + 1))
    racing.process_faults.append(
        model.ProcessFault(T0 - 0.003, "pause", 1, "w1", "worker", until=T0 + 4)
    )
    assert limit_held(racing).ok
    # A pause that ended before the run began does not stop it.
    racing.process_faults[0] = model.ProcessFault(T0 - 2, "pause", 1, "w1", "worker", until=T0 - 1)
    assert not limit_held(racing).ok
    left = run()
    left.snapshot["leftovers"]["limit_waiting"] = 1
    assert not limit_held(left).ok


# ----- the workflow class -----------------------------------------------------------------

M1, M2, CB, WF = "m" * 22, "n" * 22, "c" * 22, "w" * 22


def chord_run() -> dict[str, Any]:
    """One chord of two members and its callback, fanned in correctly."""
    raw = healthy()
    raw["submissions"].append(row("workflow", T0, id=WF, members=[M1, M2], callback=CB))
    records = raw["snapshot"]["records"]
    records[M1] = record(M1, "chaos.ordinary", "SUCCEEDED", 1, T0 + 0.2)
    records[M2] = record(M2, "chaos.ordinary", "SUCCEEDED", 1, T0 + 0.3)
    records[CB] = record(CB, "chaos.gather", "SUCCEEDED", 1, T0 + 0.5)
    records[CB]["created_at"] = str(int((T0 + 0.3) * 1000))
    raw["snapshot"]["events"] += [["TASK_SUBMITTED", t, 0, "QUEUED", 0] for t in (M1, M2, CB)]
    raw["snapshot"]["workflows"] = {
        WF: {"id": WF, "state": "SUCCEEDED", "done": "3", "s:0": "SUCCEEDED", "s:1": "SUCCEEDED"}
        | {"s:2": "SUCCEEDED", "r:0": "1", "r:1": "2", "r:2": "[1,2]"}
    }
    return raw


def fan_in_ok(raw: dict[str, Any]) -> bool:
    from tests.chaos.check import workflow_fan_in

    data = model.RunData(**raw)
    model.index(data)
    return workflow_fan_in(data).ok


def test_a_chord_fanned_in_once_passes() -> None:
    assert fan_in_ok(chord_run())


@pytest.mark.parametrize(
    "plant",
    [
        lambda raw: raw["snapshot"]["events"].append(["TASK_SUBMITTED", CB, 0, "QUEUED", 0]),
        lambda raw: raw["snapshot"]["workflows"][WF].update(done="4"),
        lambda raw: raw["snapshot"]["records"][CB].update(created_at=str(int(T0 * 1000))),
        lambda raw: raw["snapshot"]["workflows"][WF].update({"r:2": "[2,1]"}),
        lambda raw: raw["snapshot"]["workflows"][WF].update(state="RUNNING"),
        lambda raw: raw["snapshot"]["workflows"].clear(),
    ],
    ids=["submitted twice", "counted twice", "released early", "order", "unfinished", "gone"],
)
def test_a_broken_fan_in_fails(plant: Any) -> None:
    raw = chord_run()
    plant(raw)
    assert not fan_in_ok(raw)


# ----- several shards: every task where its id says, counters per shard ------------------

S0, S2 = "0" * 10 + "00" + "a" * 10, "0" * 10 + "02" + "b" * 10  # ids naming shards 0 and 2


def three_shards(**snapshot: Any) -> model.RunData:
    """A drained three-shard run: S0 succeeded in shard 0, S2 dead-lettered in shard 2."""
    records = {
        S0: record(S0, "chaos.ordinary", "SUCCEEDED", 1, T0 + 0.2) | {"shard": 0},
        S2: record(S2, "chaos.poison", "DEAD_LETTERED", 3, T0 + 3.1) | {"shard": 2},
    }
    snap = {
        "shards": 3,
        "records": records,
        "indexes_by_shard": [{"SUCCEEDED": [S0]}, {}, {"DEAD_LETTERED": [S2]}],
        "dlq": [{"entry": "1-0", "task": S2, "shard": 2}],
        "stats": {"submitted": 2, "succeeded": 1, "dead_lettered": 1},
        "stats_by_shard": [{"submitted": 1, "succeeded": 1}, {}, {"submitted": 1}],
        **snapshot,
    }
    snap["stats_by_shard"][2].setdefault("dead_lettered", 1)
    submissions = [
        row("submit", T0, result="ok", id=S0, cls="limited", max_attempts=3),
        row("submit", T0, result="ok", id=S2, cls="poison", max_attempts=3),
    ]
    data = model.RunData({}, "p", [], [], submissions, [], [], snap)
    model.index(data)
    return data


def test_tasks_in_the_shards_their_ids_name_pass() -> None:
    data = three_shards()
    assert in_its_shard(data).ok, in_its_shard(data).examples
    assert counters_agree(data).ok, counters_agree(data).examples


@pytest.mark.parametrize(
    "snapshot",
    [
        {"record_copies": {S0: [0, 1]}},
        {"indexes_by_shard": [{"SUCCEEDED": [S0]}, {"DEAD_LETTERED": [S2]}, {}]},
        {"dlq": [{"entry": "1-0", "task": S2, "shard": 0}]},
        {"idempotency": {"k": {"task": S0}}, "idempotency_shards": {"k": [1]}},
    ],
    ids=["two copies", "index elsewhere", "dlq elsewhere", "idempotency elsewhere"],
)
def test_a_task_part_in_another_shard_is_caught(snapshot: dict[str, Any]) -> None:
    assert not in_its_shard(three_shards(**snapshot)).ok


def test_a_record_in_another_shard_than_its_id_names_is_caught() -> None:
    data = three_shards()
    data.snapshot["records"][S2]["shard"] = 1
    assert "record in shard 1, its id names 2" in " ".join(in_its_shard(data).examples)


def test_a_limit_line_split_over_shards_is_caught() -> None:
    data = three_shards()
    data.accepted[S2]["cls"] = "limited"
    assert not in_its_shard(data).ok


def test_counters_are_checked_in_each_shard() -> None:
    # The totals agree, but shard 0 counted shard 2's submit.
    bad = three_shards(stats_by_shard=[{"submitted": 2, "succeeded": 1}, {}, {}])
    assert counters_agree(bad).examples == [
        "shard 0: submitted: counter 2 != records 1",
        "shard 2: submitted: counter 0 != records 1",
    ]
