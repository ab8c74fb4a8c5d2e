"""Helpers for the task-control tests: drive the real scripts by hand, check invariants."""

from __future__ import annotations

from typing import Any

from dtq.conf import dtq_settings
from dtq.engine import codec, gateway, layout, shards
from dtq.engine import events as events_of
from dtq.engine.audit import Actor
from dtq.engine.keys import BANDS, GROUP, Keys
from tests.script_calls import Scripts

ACTOR = Actor(name="tester", source="command")


def keys(shard: int = 0) -> Keys:
    return Keys(dtq_settings.KEY_PREFIX, shard)


def _on(client: Any, shard: int) -> Any:
    """The client reaching a shard: the one given, unless the shard is on another primary."""
    return (
        client if shard == shards.HOME or not dtq_settings.REDIS_CLUSTER else shards.client(shard)
    )


def claim_by_hand(
    queue: str = "tests", n: int = 1, worker: str = "ghost", shard: int | None = None
) -> list[dict[str, Any]]:
    """Read and claim up to n entries like a worker that then never heartbeats.

    From one shard, or (None) from every shard in order, each for what the ones before left.
    """
    if shard is None:
        claimed: list[dict[str, Any]] = []
        for each in shards.numbers():
            if len(claimed) < n:
                claimed += claim_by_hand(queue, n - len(claimed), worker, each)
        return claimed
    client = shards.client(shard)
    scripts = Scripts.of(client)
    k, argv = layout.build(keys(shard), [queue], layout=layout.of("read"))
    entries, _ = scripts.read(keys=k, args=[*argv, worker, n])
    refs, args = [], []
    for i in range(0, len(entries), 5):
        qi, band, eid, task_id, idem = entries[i : i + 5]
        refs.append(layout.TaskRef(task_id or "gone", queue, idem or ""))
        args += [qi, band, eid]
    if not refs:
        return []
    k, argv = layout.build(keys(shard), [queue], refs, layout=layout.of("claim"))
    lease_ms = int(dtq_settings.lease_timeout * 1000)
    reply = scripts.claim(keys=k, args=[*argv, worker, lease_ms, *args])
    return [
        {
            "id": att.id,
            "entry": att.entry,
            "band": att.band,
            "attempt": att.attempt,
            "idem": att.idem,
            "worker": worker,
        }
        for att in gateway.CLAIMED.decode(reply)
    ]


def finalize_by_hand(
    claimed: dict[str, Any],
    outcome: str,
    data: Any = None,
    queue: str = "tests",
    delay_ms: int = 0,
    history: str | None = None,
    use_dlq: bool = True,
) -> int:
    """Record an outcome for an attempt claimed by hand; return 1 applied, 0 fenced out."""
    shard = shards.of_task(claimed["id"]).shard
    scripts = Scripts.of(shards.client(shard))
    ref = layout.TaskRef(claimed["id"], queue, claimed["idem"])
    k, argv = layout.build(keys(shard), [queue], [ref], layout=layout.of("finalize"))
    if data is None:
        data = {"class": "builtins.ValueError", "message": "by hand"}
    if history is None:
        history = codec.dumps({"attempt": claimed["attempt"], "outcome": outcome})
    args = [1, claimed["band"], claimed["entry"], claimed["attempt"], outcome, codec.dumps(data)]
    args += [history, delay_ms]
    worker = claimed.get("worker", "ghost")
    reply = scripts.finalize(keys=k, args=[*argv, "1" if use_dlq else "0", worker, *args])
    return 1 if reply[0] else 0  # reply: (state decided, resent); '' when fenced out


def dead_letter_by_hand(count: int, queue: str = "tests", shard: int | None = None) -> list[str]:
    """Claim and permanently fail `count` queued tasks of queue on a shard; return their ids."""
    done = []
    for claimed in claim_by_hand(queue, count, shard=shard):
        assert finalize_by_hand(claimed, "fail", queue=queue) == 1
        done.append(claimed["id"])
    return done


def fail_by_hand(count: int, queue: str = "tests", shard: int | None = None) -> list[str]:
    """Claim and permanently fail `count` queued tasks as with DLQ_ENABLED off (FAILED)."""
    done = []
    for claimed in claim_by_hand(queue, count, shard=shard):
        assert finalize_by_hand(claimed, "fail", queue=queue, use_dlq=False) == 1
        done.append(claimed["id"])
    return done


def events(client: Any, kind: str | None = None, task_id: str | None = None) -> list[dict]:
    """Return lifecycle events of every shard, oldest first, filtered by type and task."""
    rows = [
        row
        for k in shards.every()
        for row in events_of.decode(_on(client, k.shard).xrange(k.events))
    ]
    rows.sort(key=lambda row: tuple(int(part) for part in row["id"].split("-")))
    return [
        r
        for r in rows
        if (kind is None or r["type"] == kind) and (task_id is None or r["task"] == task_id)
    ]


def orphans(client: Any, queue: str = "tests") -> list[str]:
    """Return every broken link between records, streams, PELs, schedule and indexes."""
    return [p for k in shards.every() for p in _orphans_in(_on(client, k.shard), k, queue)]


def _orphans_in(client: Any, k: Keys, queue: str) -> list[str]:
    problems = []
    entries: dict[str, str] = {}
    for band in BANDS:
        stream = k.stream(queue, band)
        for eid, fields in client.xrange(stream):
            entries[eid] = fields.get("t", "")
        if client.exists(stream) and client.xinfo_groups(stream):
            for row in client.xpending_range(stream, GROUP, "-", "+", 10000):
                task_id = entries.get(row["message_id"], "")
                if not task_id or not client.exists(k.task(task_id)):
                    problems.append(f"pending entry {row['message_id']} has no record")
    for task_id in client.zrange(k.index(queue, "QUEUED"), 0, -1):
        delivery = client.hget(k.task(task_id), "delivery")
        if client.hget(k.task(task_id), "state") != "QUEUED":
            problems.append(f"{task_id} indexed QUEUED but is not")
        elif delivery not in entries:
            problems.append(f"{task_id} QUEUED without its entry")
    for task_id in client.zrange(k.schedule, 0, -1):
        if client.hget(k.task(task_id), "state") not in ("PENDING", "RETRYING"):
            problems.append(f"schedule member {task_id} is not waiting")
    return problems
