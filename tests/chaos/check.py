"""The offline checker: invariants over the evidence of a run (files only, no Redis).

Each check returns a Check; a run passes when every check holds. `python -m tests.chaos.check
RUN_DIR` re-checks a finished run.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from dtq.engine.cron import Timing
from dtq.engine.ids import shard_of
from tests.chaos import analysis
from tests.chaos.config import PERIODIC
from tests.chaos.model import TERMINAL, TERMINAL_EVENTS, Execution, ProcessFault, RunData, load

MAX_EXAMPLES = 8
REDIS_LOSS_WINDOW = 2.0  # seconds before a Redis SIGKILL whose writes AOF everysec may lose
CLOCK_SLACK = 0.05  # seconds: Redis TIME (claim events) against the witness' time.time()
SUCCESSFUL = {
    "ordinary",
    "async",
    "flaky",
    "slow",
    "long",
    "delayed",
    "idem",
    "periodic",
    "limited",
}
SUCCESSFUL |= {"wf_member", "wf_callback"}


@dataclass(slots=True)
class Check:
    """One invariant: whether it held, a one-line summary, and a few counter-examples."""

    name: str
    ok: bool
    summary: str
    examples: list[str] = field(default_factory=list)


def _check(name: str, bad: list[str], summary: str) -> Check:
    return Check(name, not bad, summary, bad[:MAX_EXAMPLES])


def drained(d: RunData) -> Check:
    """The drain finished within its time limit and the Redis snapshot was taken."""
    ok = "drained" in d.phases and bool(d.snapshot)
    return Check("drain completes", ok, "drained" if ok else "drain timed out or no snapshot")


def _redis_window(d: RunData, acked: float) -> bool:
    if d.snapshot.get("appendfsync") == "always":
        return False  # fsync before every reply: nothing acknowledged may be lost
    return any(
        o.signal == "SIGKILL" and o.down - REDIS_LOSS_WINDOW <= acked <= o.down for o in d.outages
    )


def lost(d: RunData) -> Check:
    """Every accepted task exists at the end, in a terminal state."""
    bad, by_redis = [], []
    for tid, row in d.accepted.items():
        rec = d.records.get(tid)
        if rec is None or rec["state"] not in TERMINAL:
            where = by_redis if _redis_window(d, row["t"]) else bad
            where.append(f"{tid} ({row['cls']}): {rec['state'] if rec else 'no record'}")
    unacked = [t for t, m in analysis.tasks(d).items() if m.get("unacknowledged")]
    summary = f"lost={len(bad)} of {len(d.accepted)} accepted"
    if d.config.get("topology", "single") != "single":
        summary += f" ({len(d.failovers)} primary kills, SUBMIT_REPLICAS=1: no exception)"
    elif d.snapshot.get("appendfsync") == "always":
        summary += " (appendfsync always: no exception for a Redis SIGKILL)"
    else:
        summary += f"; lost by Redis itself in the last {REDIS_LOSS_WINDOW:.0f}s before a SIGKILL"
        summary += f" (AOF everysec, reported apart)={len(by_redis)}"
        if by_redis:
            summary += " e.g. " + ", ".join(by_redis[:3])
    summary += f"; kept although the submit saw an error={len(unacked)}"
    return _check("lost = 0", bad, summary)


def one_terminal_state(d: RunData) -> Check:
    """Each task ends in one terminal state: one terminal event, one state index."""
    terminal_events: Counter[str] = Counter(
        e[1] for e in d.snapshot.get("events", []) if e[0] in TERMINAL_EVENTS
    )
    member: dict[str, list[str]] = defaultdict(list)
    for state, ids in d.snapshot.get("indexes", {}).items():
        for tid in ids:
            member[tid].append(state)
    bad = []
    for tid, rec in d.records.items():
        if (
            rec["state"] not in TERMINAL
            or terminal_events[tid] != 1
            or member[tid] != [rec["state"]]
        ):
            bad.append(
                f"{tid}: state={rec['state']} terminal events={terminal_events[tid]} "
                f"indexes={member[tid]}"
            )
    return _check("exactly one terminal state", bad, f"{len(d.records)} task records checked")


def no_run_after_completion(d: RunData) -> Check:
    """No execution starts after the task's completion was recorded (a pause explains none)."""
    bad, zombies = [], 0
    for tid, runs in d.executions.items():
        done = analysis.finished_at(d.records.get(tid))
        for ex in runs:
            if done is not None and ex.start > done + 0.001:
                bad.append(f"{tid} attempt {ex.attempt} started {ex.start - done:.3f}s after")
            if done is not None and ex.end is not None and ex.end > done + 0.001:
                zombies += 1
    summary = (
        f"late starts={len(bad)}; executions that finished after completion "
        f"(paused workers, their outcome fenced out)={zombies}"
    )
    return _check("no execution after completion", bad, summary)


def started_within_lease(d: RunData) -> Check:
    """No handler starts after its attempt's lease ran out (a pause explains none).

    The deadline is the claim's (TASK_STARTED) plus the lease: renewals are not in the
    evidence, and a chaos handler starts right after its claim unless its worker is frozen.
    A given-back attempt is claimed again under the same number: the latest claim counts.
    """
    lease = float(d.config.get("lease", 3.0))
    claims: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in d.snapshot.get("events", []):
        if e[0] == "TASK_STARTED":
            claims[(e[1], int(e[2] or 0))].append(e[4] / 1000)
    bad, worst = [], 0.0
    for runs in d.executions.values():
        for ex in runs:
            before = [t for t in claims.get((ex.id, ex.attempt), []) if t <= ex.start + CLOCK_SLACK]
            if not before:
                continue  # claim event lost with Redis (AOF everysec): nothing to measure
            late = ex.start - max(before)
            worst = max(worst, late)
            if late > lease + CLOCK_SLACK:
                bad.append(f"{ex.id} attempt {ex.attempt} on pid {ex.pid}: {late:.3f}s after claim")
    summary = f"slowest claim-to-start {worst:.3f}s (lease {lease:g}s); late starts={len(bad)}"
    return _check("no handler starts after its lease ran out", bad, summary)


def attempt_once(d: RunData) -> Check:
    """No (task, attempt) pair is executed twice: every execution got its own claim, unless
    the claim reached only a primary that was killed (the promoted replica delivers it again)."""
    runs: defaultdict[tuple[str, int], list[Execution]] = defaultdict(list)
    for ex in (ex for task_runs in d.executions.values() for ex in task_runs):
        runs[ex.id, ex.attempt].append(ex)
    bad, by_failover = [], 0
    for (tid, a), same in runs.items():
        if len(same) < 2:
            continue
        since = same[0].start - analysis.SLACK
        kills = analysis.killed_primaries(d, since, same[1].start, tid)
        if any(analysis.claim_lost(same[0], kill) for kill in kills):
            by_failover += 1
        else:
            bad.append(f"{tid} attempt {a} ran {len(same)} times")
    summary = f"{sum(map(len, runs.values()))} executions"
    if d.failovers:
        summary += f"; claims rolled back by a primary kill (run again)={by_failover}"
    return _check("each attempt executed at most once", bad, summary)


def duplicates_explained(d: RunData) -> Check:
    """A task runs again without asking for a retry only after its process was killed/paused."""
    redo = analysis.reexecutions(d)
    bad = [
        f"{r.task}: attempt {r.prev.attempt} on pid {r.prev.pid} ({r.prev.outcome}) then "
        f"attempt {r.next.attempt} on pid {r.next.pid} at +{r.next.start - r.prev.start:.2f}s"
        for r in redo
        if r.cause is None
    ]
    causes = Counter(r.cause.kind for r in redo if r.cause)
    summary = f"re-executions={len(redo)} explained by {dict(causes)}; unexplained={len(bad)}"
    return _check("duplicates explained by a fault (unexplained = 0)", bad, summary)


def reclaims_explained(d: RunData) -> Check:
    """The reaper takes an attempt back only from a worker that was killed, paused or died."""
    found = analysis.lost_attempts(d)
    bad = [
        f"{a.task} attempt {a.attempt} (pid {a.pid}, {'ran' if a.executed else 'never ran'}): "
        f"claimed {a.claimed:.3f}, reclaimed after {a.reclaimed - a.claimed:.2f}s"
        for a in found
        if a.cause is None
    ]
    never_ran = sum(1 for a in found if not a.executed)
    summary = (
        f"reclaimed attempts={len(found)} (never started: {never_ran}); unexplained={len(bad)}"
    )
    return _check("every reclaimed attempt explained by a fault", bad, summary)


def attempt_limit(d: RunData) -> Check:
    """Attempts never exceed max_attempts, in the witness and in the record."""
    meta, bad = analysis.tasks(d), []
    for tid, m in meta.items():
        limit = int(m["max_attempts"])
        top = max((ex.attempt for ex in d.executions.get(tid, [])), default=0)
        rec_attempt = int((d.records.get(tid) or {}).get("attempt") or 0)
        if max(top, rec_attempt) > limit:
            bad.append(f"{tid}: executed attempt {top}, record attempt {rec_attempt} > {limit}")
    return _check("attempts <= max_attempts", bad, f"{len(meta)} tasks")


def _cancelled_ids(d: RunData) -> set[str]:
    accepted = ("cancelled", "requested")
    return {c["id"] for c in d.cancels if c["reply"] and c["reply"][0] in accepted}


def dlq_contents(d: RunData) -> Check:
    """The DLQ holds exactly the poison tasks, the crashers and the exhausted tasks, once."""
    meta, cancelled = analysis.tasks(d), _cancelled_ids(d)
    entries = Counter(e["task"] for e in d.snapshot.get("dlq", []))
    dead = {t for t, r in d.records.items() if r["state"] == "DEAD_LETTERED"}
    bad = [f"{t}: {n} DLQ entries" for t, n in entries.items() if n > 1]
    bad += [f"{t}: DEAD_LETTERED but not in the DLQ" for t in dead - set(entries)]
    bad += [f"{t}: in the DLQ but {d.records.get(t, {}).get('state')}" for t in set(entries) - dead]
    kinds: Counter[str] = Counter()
    for tid in dead:
        rec, cls = d.records[tid], meta.get(tid, {}).get("cls", "?")
        exhausted = int(rec["attempt"]) >= int(rec["max_attempts"])
        kinds[cls if cls in ("poison", "crasher") else "exhausted"] += 1
        if not exhausted:
            bad.append(f"{tid} ({cls}): dead-lettered at attempt {rec['attempt']}")
    for tid, m in meta.items():
        if m.get("cls") in ("poison", "crasher") and tid not in dead | cancelled:
            bad.append(f"{tid} ({m['cls']}): {d.records.get(tid, {}).get('state')}, not in DLQ")
    return _check("DLQ = poison + crashers + exhausted", bad, f"DLQ by kind: {dict(kinds)}")


def final_states(d: RunData) -> Check:
    """Each class ends where it should (a cancelled task may end CANCELLED instead)."""
    meta, cancelled, bad = analysis.tasks(d), _cancelled_ids(d), []
    for tid, m in meta.items():
        rec = d.records.get(tid)
        if rec is None:
            continue  # reported by 'lost = 0'
        allowed = {"SUCCEEDED"} if m["cls"] in SUCCESSFUL else {"DEAD_LETTERED"}
        allowed |= {"DEAD_LETTERED"} if int(rec["attempt"]) >= int(rec["max_attempts"]) else set()
        allowed |= {"CANCELLED"} if tid in cancelled else set()
        if rec["state"] not in allowed:
            bad.append(f"{tid} ({m['cls']}): {rec['state']} at attempt {rec['attempt']}")
    return _check("final state matches the task class", bad, f"{len(meta)} tasks")


def cancels_honoured(d: RunData) -> Check:
    """A task cancelled while waiting ends CANCELLED and never starts afterwards."""
    bad = []
    for c in d.cancels:
        if not c["reply"] or c["reply"][0] != "cancelled":
            continue
        rec = d.records.get(c["id"]) or {}
        if rec.get("state") != "CANCELLED":
            bad.append(f"{c['id']}: cancelled, ends {rec.get('state')}")
        late = [ex for ex in d.executions.get(c["id"], []) if ex.start > c["t"]]
        if late:
            bad.append(f"{c['id']}: started {late[0].start - c['t']:.3f}s after its cancel")
    replies = Counter(c["reply"][0] if c["reply"] else "?" for c in d.cancels)
    return _check("cancels honoured", bad, f"cancel replies: {dict(replies)}")


def delayed_not_early(d: RunData) -> Check:
    """A delayed task never starts before its run time."""
    bad = []
    for tid, row in d.accepted.items():
        rec = d.records.get(tid)
        if not row.get("delay") or not rec or not rec.get("created_at"):
            continue
        due = int(rec["created_at"]) / 1000 + row["delay"]
        first = d.executions.get(tid, [])
        if first and first[0].start < due - 0.002:
            bad.append(f"{tid}: started {due - first[0].start:.3f}s early")
    return _check("delayed tasks never start early", bad, "")


def idempotency(d: RunData) -> Check:
    """One task per idempotency key; resubmits point at it; no key stuck 'processing'."""
    by_key: dict[str, set[str]] = defaultdict(set)
    oks: Counter[str] = Counter()
    for row in d.submissions:
        if row["kind"] == "submit" and row.get("key") and row.get("id"):
            by_key[row["key"]].add(row["id"])
            oks[row["key"]] += row["result"] == "ok"
    for runs in d.executions.values():
        for ex in runs:
            if ex.key:
                by_key[ex.key].add(ex.id)
    bad = [f"key {k}: tasks {sorted(ids)}" for k, ids in by_key.items() if len(ids) > 1]
    bad += [f"key {k}: accepted {n} times" for k, n in oks.items() if n > 1]
    for key, ids in by_key.items():
        rec = d.snapshot.get("idempotency", {}).get(key) or {}
        if rec.get("task") not in ids or rec.get("state") == "processing":
            bad.append(f"key {key}: record {rec} (tasks {sorted(ids)})")
    replies = Counter(r["result"] for r in d.submissions if r.get("resubmit"))
    return _check(
        "one task per idempotency key, none stuck",
        bad,
        f"{len(by_key)} keys; resubmit answers: {dict(replies)}",
    )


PERIODIC_LAST_PASS_MS = 1500  # a slot this close to the pause may still be on its way


def periodic_slots(d: RunData) -> Check:
    """Each periodic slot fired once, from the first firing up to the pause after the heal."""
    paused = next((r for r in d.events if r["kind"] == "periodic_paused"), None)
    name = "periodic: each slot fired once (double = 0, missed = 0)"
    if paused is None:  # the scenario pauses them after the heal; a drain failure says why not
        return Check(name, "drained" not in d.phases, "no periodic schedules in this run")
    fired: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    starts: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in d.witness:
        if row.get("cls") == "tick" and row.get("ev") == "start":
            fired[row["schedule"]][row["slot"]].add(row["id"])
            starts[(row["schedule"], row["slot"])].append(row["t"])
    bad, by_redis, parts = [], [], []
    for schedule, (cron, every, zone) in PERIODIC.items():
        slots = fired.get(schedule, {})
        if not slots:
            bad.append(f"{schedule}: never fired")
            continue
        timing = Timing.of(cron, timedelta(seconds=every) if every else None, zone)
        until = paused["redis_ms"] - PERIODIC_LAST_PASS_MS
        expected = timing.slots(min(slots) - 1, until, 1_000_000)
        missing = sorted(set(expected) - set(slots))
        bad += [f"{schedule}: slot {s} never fired" for s in missing]
        for slot, ids in sorted(slots.items()):
            if len(ids) > 1:
                where = by_redis if _redis_window(d, min(starts[(schedule, slot)])) else bad
                where.append(f"{schedule}: slot {slot} fired as {len(ids)} tasks {sorted(ids)}")
        doubles = sum(1 for ids in slots.values() if len(ids) > 1)
        parts.append(
            f"{schedule}: {len(expected)} slots, double-fired={doubles}, missed={len(missing)}"
        )
    summary = "; ".join(parts) + f"; doubles Redis itself may explain={len(by_redis)}"
    return _check(name, bad, summary)


def limit_held(d: RunData) -> Check:
    """No more 'limited' tasks ran at once than their max_concurrency, and none is left waiting.

    An execution counts from its start to its end, or to the moment its worker was killed or
    frozen (a frozen worker's attempt is reclaimed after its lease and its slot handed on:
    that is the design, not an overlap). A freeze a worker gives itself at a failpoint is
    logged a few milliseconds before the SIGSTOP lands, and another thread may start a
    handler in between: a pause still under way at a start stops that execution at once.
    """
    from tests.chaos.tasks import LIMITED_CONCURRENCY

    faults: dict[int, list[ProcessFault]] = defaultdict(list)
    for fault in d.process_faults:
        faults[fault.pid].append(fault)
    marks: list[tuple[float, int, str]] = []
    for tid, runs in d.executions.items():
        for ex in runs:
            if ex.cls != "limited":
                continue
            stops = [
                max(f.t, ex.start)
                for f in faults[ex.pid]
                if f.t >= ex.start or (f.kind == "pause" and (f.until or 0) > ex.start)
            ]
            stop = min([*stops, ex.end or float("inf")])
            if stop == float("inf") or stop <= ex.start:
                continue  # nothing to bound it by, or stopped as it began
            marks += [(ex.start, 1, tid), (stop, -1, tid)]
    running: set[str] = set()
    most, bad = 0, []
    for t, step, tid in sorted(marks, key=lambda m: (m[0], m[1])):  # ends first at a tie
        if step > 0:
            running.add(tid)
        else:
            running.discard(tid)
        most = max(most, len(running))
        if step > 0 and len(running) > LIMITED_CONCURRENCY:
            bad.append(f"at {t:.3f}: {sorted(running)} ran at once")
    left = d.snapshot.get("leftovers", {})
    waiting = {k: v for k, v in left.items() if k.startswith("limit_")}
    bad += [f"{name}={n} left after the drain" for name, n in waiting.items() if n]
    summary = f"most at once={most} (limit {LIMITED_CONCURRENCY}); after the drain {waiting}"
    return _check("concurrency limit held, nothing left waiting", bad, summary)


def workflow_fan_in(d: RunData) -> Check:
    """Each chord's callback was submitted once, after every member ended, with their results."""
    stored = d.snapshot.get("workflows", {})
    submitted: Counter[str] = Counter(
        e[1] for e in d.snapshot.get("events", []) if e[0] == "TASK_SUBMITTED"
    )
    bad, done = [], 0
    for row in d.submissions:
        if row["kind"] != "workflow":
            continue
        wf, members, callback = stored.get(row["id"]), row["members"], row["callback"]
        if wf is None:
            bad.append(f"{row['id']}: no workflow hash")
            continue
        header = [d.records.get(m) for m in members]
        cb = d.records.get(callback)
        finals = sum(1 for k in wf if k.startswith("s:"))
        problems = []
        if wf.get("state") != "SUCCEEDED":
            problems.append(f"state {wf.get('state')}")
        if int(wf.get("done", -1)) != len(members) + 1 or finals != len(members) + 1:
            problems.append(f"done {wf.get('done')} with {finals} final members")
        if submitted[callback] != 1:
            problems.append(f"callback submitted {submitted[callback]} times")
        ends = [int(r["finished_at"]) for r in header if r and r.get("finished_at")]
        if cb is None or len(ends) != len(members) or int(cb["created_at"]) < max(ends):
            problems.append("callback submitted before every member ended (or missing)")
        results = [wf.get(f"r:{i}") for i in range(len(members))]
        if wf.get(f"r:{len(members)}") != "[" + ",".join(str(r) for r in results) + "]":
            problems.append("callback result is not the members' results in order")
        if problems:
            bad.append(f"{row['id']}: " + "; ".join(problems))
        else:
            done += 1
    return _check("workflow fan-in exact", bad, f"{done} chords fanned in exactly once")


def nothing_in_flight(d: RunData) -> Check:
    """After the drain, in every shard: XPENDING empty, no stream entry, schedule/running/active
    all zero."""
    left = dict(d.snapshot.get("leftovers", {}))
    left["active"] = d.snapshot.get("stats", {}).get("active", 0)
    bad = [f"{name}={n}" for name, n in left.items() if n]
    for n, shard in enumerate(d.snapshot.get("leftovers_by_shard", [])):
        bad += [f"shard {n}: {name}={v}" for name, v in shard.items() if v]
    bad += [f"orphan schedule member {tid}" for tid in d.snapshot.get("schedule", [])]
    bad += [f"running member {tid}" for tid in d.snapshot.get("running", [])]
    summary = ", ".join(f"{k}={v}" for k, v in left.items())
    return _check("nothing pending or orphaned", bad, summary)


def _counter_mismatches(stats: dict[str, int], records: list[dict[str, Any]]) -> list[str]:
    """Return the counters of one queue (or shard) that disagree with its records."""
    states = Counter(r["state"] for r in records)
    pairs = {
        "submitted": len(records),
        "succeeded": states["SUCCEEDED"],
        "failed": states["FAILED"],
        "dead_lettered": states["DEAD_LETTERED"],
        "cancelled": states["CANCELLED"],
        "expired": states["EXPIRED"],
    }
    return [
        f"{k}: counter {stats.get(k, 0)} != records {n}"
        for k, n in pairs.items()
        if stats.get(k, 0) != n
    ]


def counters_agree(d: RunData) -> Check:
    """The queue's counters agree with the records: one submit and one ending per task, summed
    over shards and in each shard (a task is counted in the shard it lives in)."""
    records = list(d.records.values())
    bad = _counter_mismatches(d.snapshot.get("stats", {}), records)
    by_shard = d.snapshot.get("stats_by_shard", [])
    if len(by_shard) > 1:
        for n, stats in enumerate(by_shard):
            mine = [r for r in records if r.get("shard") == n]
            bad += [f"shard {n}: {m}" for m in _counter_mismatches(stats, mine)]
    states = Counter(r["state"] for r in records)
    summary = f"{dict(states)}"
    if len(by_shard) > 1:
        summary += f"; submitted per shard {[s.get('submitted', 0) for s in by_shard]}"
    return _check("counters agree with records", bad, summary)


def in_its_shard(d: RunData) -> Check:
    """Every task lives in the shard its id names (ids.shard_of), once: its record, its index
    entries and its DLQ entry; a workflow's members and its idempotency records are with their
    task; all 'limited' tasks share one shard, their limit line's (so the limit is global)."""
    snap, bad = d.snapshot, []
    where = {tid: rec["shard"] for tid, rec in d.records.items() if "shard" in rec}
    bad += [f"{tid}: a record in shards {s}" for tid, s in snap.get("record_copies", {}).items()]
    bad += [
        f"{tid}: record in shard {n}, its id names {shard_of(tid)}"
        for tid, n in where.items()
        if n != shard_of(tid)
    ]
    for n, indexes in enumerate(snap.get("indexes_by_shard", [])):
        for state, members in indexes.items():
            bad += [f"{t}: in shard {n}'s {state} index" for t in members if where.get(t) != n]
    for entry in snap.get("dlq", []):
        if "shard" in entry and entry["shard"] != where.get(entry["task"]):
            bad.append(f"{entry['task']}: DLQ entry in shard {entry['shard']}")
    for key, found in snap.get("idempotency_shards", {}).items():
        task = snap.get("idempotency", {}).get(key, {}).get("task")
        if found != [where.get(task)]:
            bad.append(
                f"idempotency key {key}: in shards {found}, its task {task} in {where.get(task)}"
            )
    wf_shards = snap.get("workflow_shards", {})
    for row in d.submissions:
        if row["kind"] == "workflow" and row["id"] in wf_shards:
            for tid in [*row["members"], row["callback"]]:
                if where.get(tid) != wf_shards[row["id"]]:
                    bad.append(f"{tid}: member of {row['id']}, in shard {where.get(tid)}")
    limited = {
        where[t] for t, m in analysis.tasks(d).items() if m["cls"] == "limited" and t in where
    }
    if len(limited) > 1:
        bad.append(f"'limited' tasks (one limit line) in shards {sorted(limited)}")
    used = Counter(where.values())
    summary = f"{snap.get('shards', 1)} shard(s); records per shard {dict(sorted(used.items()))}"
    summary += f"; 'limited' tasks in shard(s) {sorted(limited)}"
    return _check("every task in the shard its id names", bad, summary)


def workers_resume(d: RunData) -> Check:
    """Every worker alive across a Redis restart or failover runs tasks again without being
    restarted."""
    found = analysis.resumptions(d)
    bad = [
        f"pid {r.pid} ran nothing after Redis restart or failover #{r.outage + 1}"
        for r in found
        if r.seconds is None and not r.interrupted
    ]
    seen = [r.seconds for r in found if r.seconds is not None]
    worst = f"{max(seen):.2f}s" if seen else "n/a"
    summary = (
        f"{len(d.outages)} Redis restarts, {len(d.failovers)} failovers; {len(seen)} of "
        f"{len(found)} worker survivals ran tasks again (slowest {worst}); the rest were killed "
        "or paused first"
    )
    return _check("workers resume after Redis restarts and failovers", bad, summary)


CHECKS: list[Callable[[RunData], Check]] = [
    drained,
    lost,
    one_terminal_state,
    no_run_after_completion,
    started_within_lease,
    attempt_once,
    duplicates_explained,
    reclaims_explained,
    attempt_limit,
    dlq_contents,
    final_states,
    cancels_honoured,
    delayed_not_early,
    idempotency,
    periodic_slots,
    workflow_fan_in,
    nothing_in_flight,
    limit_held,
    counters_agree,
    in_its_shard,
    workers_resume,
]


def run_checks(d: RunData) -> list[Check]:
    """Evaluate every invariant."""
    return [check(d) for check in CHECKS]


def main(argv: list[str]) -> int:
    """Re-check a finished run directory and print its report; exit 1 on a violation."""
    from tests.chaos import report

    data = load(Path(argv[0]))
    checks = run_checks(data)
    print(report.render(data, checks))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
