"""Read side: queue depths and counters, workers, processes, task lists, throughput."""

from __future__ import annotations

import time
from typing import Any, TypedDict

from redis.exceptions import ResponseError

from dtq.conf import dtq_settings
from dtq.engine import protocol, shards
from dtq.engine.keys import BANDS, GROUP, Keys, check_queue_name
from dtq.engine.layout import STATE_ORDER
from dtq.engine.limits import Rate
from dtq.engine.protocol import SUBMITTED_QUEUED
from dtq.engine.read_side.budget import current, execute
from dtq.engine.read_side.shard_pipe import ShardPipeline
from dtq.engine.read_side.tasks import _json_or_raw
from dtq.engine.state import TaskState

# ----- queues ----------------------------------------------------------------------------

COUNTERS = (*protocol.COUNTERS, "active")  # active: a level, kept by submit and finalize
# Every counter but 'active' (a level, not an event count) is also kept per minute.
THROUGHPUT_COUNTERS = tuple(c for c in COUNTERS if c != "active")
SCHEDULED_STATES = (TaskState.PENDING, TaskState.RETRYING)
ROLES = ("scheduler", "reaper")
THROUGHPUT_MINUTES = 120  # the per-minute buckets expire after two hours (lib.lua)
MAX_PAGE = 1000  # the largest page of any list


class QueueOverview(TypedDict):
    """One queue at a glance; per-band lists are indexed by band (0 high, 1 normal, 2 low)."""

    name: str
    paused: bool
    depth: list[int]  # stream length: entries waiting plus entries read but not acknowledged
    pending: list[int]  # entries read by a worker and not acknowledged yet (XPENDING)
    waiting: list[int]  # entries no worker has read yet
    states: dict[str, int]  # tasks per state, from the index zsets (terminal: within retention)
    queued: int
    running: int
    scheduled: int  # PENDING (delayed) plus RETRYING (waiting for their backoff)
    dlq: int
    counters: dict[str, int]
    oldest_waiting_age: float | None  # seconds the oldest QUEUED task has waited
    latency: dict[str, Histogram]  # "wait", "run", and "limit_wait" (time held by a limit)
    limits: QueueLimits


class QueueLimits(TypedDict):
    """A queue's flow control: its own limits and their use, and all of its tasks' slots."""

    max_concurrency: int | None
    rate: str | None  # e.g. "20/s", "100/m (burst 5)"
    in_use: int  # slots of the queue's own concurrency limit held now
    waiting: int  # tasks waiting for the queue's own concurrency limit
    slots_held: int  # every concurrency slot held on the queue (queue and task limits)
    tasks_waiting: int  # every task waiting for a slot on the queue (queue and task limits)


class Histogram(TypedDict):
    """A cumulative latency histogram, Prometheus-style: counts per upper bound in seconds."""

    buckets: list[tuple[float, int]]  # (upper bound in seconds, count <= bound); last is +inf
    sum: float  # seconds
    count: int


# Upper bounds in ms of the buckets lib.lua's observe() counts into (both from protocol.py).
LATENCY_BUCKETS_MS = protocol.LATENCY_BUCKETS_MS


def histogram(stats: dict[str, str], kind: str) -> Histogram:
    """Build the cumulative histogram `kind` ('wait' or 'run') from a queue's stats hash.

    The count is the +Inf bucket's: lib.lua's observe() writes no count field of its own.
    """
    bounds = [b / 1000 for b in LATENCY_BUCKETS_MS] + [float("inf")]
    total, buckets = 0, []
    for i, bound in enumerate(bounds, start=1):
        total += int(stats.get(f"h_{kind}_{i}", 0))
        buckets.append((bound, total))
    return {"buckets": buckets, "sum": int(stats.get(f"h_{kind}_sum", 0)) / 1000, "count": total}


def _keys() -> Keys:
    """Return the keys of HOME, the shard of process-wide keys (workers, processes)."""
    return shards.keys(shards.HOME)


def _home() -> Any:
    """Return the client of HOME (decode_responses: replies are str)."""
    return shards.client(shards.HOME)


def _now_ms(reply: tuple[int, int]) -> int:
    """Convert a TIME reply to milliseconds (the clock every script writes with)."""
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


def _raise_errors(replies: list[Any]) -> None:
    # Pipelines run with raise_on_error=False because XPENDING fails on unread streams.
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def _pending_count(reply: Any) -> int:
    if isinstance(reply, ResponseError):
        if "NOGROUP" in str(reply):
            return 0  # no worker has read this stream yet: nothing can be pending
        raise reply
    return int(reply["pending"])


def queue_names() -> list[str]:
    """Return every queue that has had a task on some shard and was not forgotten, sorted."""
    pipe = ShardPipeline()
    for keys in shards.every():
        pipe.on(keys.shard).smembers(keys.queues)
    return sorted({str(name) for known in execute(pipe) for name in known})


def _queue_commands(pipe: Any, keys: Keys, queue: str) -> None:
    for band in BANDS:
        pipe.xlen(keys.stream(queue, band))
    for band in BANDS:
        pipe.xpending(keys.stream(queue, band), GROUP)
    for state in STATE_ORDER:
        pipe.zcard(keys.index(queue, state))
    pipe.xlen(keys.dlq(queue))
    pipe.hgetall(keys.stats(queue))
    pipe.zrange(keys.index(queue, TaskState.QUEUED), 0, 0, withscores=True)
    pipe.hmget(keys.limits(queue), "max_concurrency", "rate")
    pipe.zlexcount(keys.limit_held(queue), "[cq\0", "(cq\1")
    pipe.zlexcount(keys.limit_wait(queue), "[cq\0", "(cq\1")
    pipe.zcard(keys.limit_held(queue))
    pipe.zcard(keys.limit_wait(queue))


QUEUE_REPLIES = 2 * len(BANDS) + len(STATE_ORDER) + 8  # replies _queue_commands adds


def rate_text(encoded: str | None) -> str | None:
    """Return a queue limits hash's "<count>|<period ms>|<burst>" rate as text ("20/s")."""
    if not encoded:
        return None
    count, period, burst = (int(part) for part in encoded.split("|"))
    return str(Rate(count, period, burst))


def _limits(replies: list[Any]) -> QueueLimits:
    (conc, rate), in_use, waiting, held, waiters = replies
    return {
        "max_concurrency": int(conc) if conc else None,
        "rate": rate_text(rate),
        "in_use": int(in_use),
        "waiting": int(waiting),
        "slots_held": int(held),
        "tasks_waiting": int(waiters),
    }


def _parse_queue(queue: str, replies: list[Any], paused: bool, now_ms: int) -> QueueOverview:
    nb, ns = len(BANDS), len(STATE_ORDER)
    _raise_errors(replies[:nb] + replies[2 * nb :])
    depth = [int(n) for n in replies[:nb]]
    pending = [_pending_count(r) for r in replies[nb : 2 * nb]]
    counts = replies[2 * nb : 2 * nb + ns]
    states = {str(s): int(n) for s, n in zip(STATE_ORDER, counts, strict=True)}
    dlq, stats, oldest = replies[2 * nb + ns : 2 * nb + ns + 3]
    # Only declared counters: the stats hash also holds histograms (h_*) and pause_token.
    counted = {k: int(v) for k, v in stats.items() if k in COUNTERS or k == SUBMITTED_QUEUED}
    counters = dict.fromkeys(COUNTERS, 0) | protocol.fold_counters(counted)
    return {
        "name": queue,
        "paused": paused,
        "depth": depth,
        "pending": pending,
        "waiting": [max(d - p, 0) for d, p in zip(depth, pending, strict=True)],
        "states": states,
        "queued": states[TaskState.QUEUED],
        "running": states[TaskState.RUNNING],
        "scheduled": sum(states[s] for s in SCHEDULED_STATES),
        "dlq": int(dlq),
        "counters": counters,
        "latency": {kind: histogram(stats, kind) for kind in ("wait", "run", "limit_wait")},
        "limits": _limits(replies[2 * nb + ns + 3 :]),
        "oldest_waiting_age": max(now_ms - oldest[0][1], 0) / 1000 if oldest else None,
    }


def _add_histograms(a: Histogram, b: Histogram) -> Histogram:
    return {
        "buckets": [
            (bound, x + y) for (bound, x), (_, y) in zip(a["buckets"], b["buckets"], strict=True)
        ],
        "sum": a["sum"] + b["sum"],
        "count": a["count"] + b["count"],
    }


def _merge(parts: list[QueueOverview]) -> QueueOverview:
    """Sum one queue's overviews of every shard (HOME first, whose limits settings count).

    A queue limit is set on every shard (ops.set_queue_limits), so HOME's value is the
    setting; a queue is shown paused when any shard is (a pause that failed part way shows).
    """
    total = parts[0]
    for part in parts[1:]:
        ages = [
            a for a in (total["oldest_waiting_age"], part["oldest_waiting_age"]) if a is not None
        ]
        limits = total["limits"]
        total = {
            **total,
            "paused": total["paused"] or part["paused"],
            "depth": [x + y for x, y in zip(total["depth"], part["depth"], strict=True)],
            "pending": [x + y for x, y in zip(total["pending"], part["pending"], strict=True)],
            "waiting": [x + y for x, y in zip(total["waiting"], part["waiting"], strict=True)],
            "states": {s: n + part["states"][s] for s, n in total["states"].items()},
            "queued": total["queued"] + part["queued"],
            "running": total["running"] + part["running"],
            "scheduled": total["scheduled"] + part["scheduled"],
            "dlq": total["dlq"] + part["dlq"],
            "counters": {c: n + part["counters"][c] for c, n in total["counters"].items()},
            "latency": {
                kind: _add_histograms(h, part["latency"][kind])
                for kind, h in total["latency"].items()
            },
            "limits": {
                **limits,
                "in_use": limits["in_use"] + part["limits"]["in_use"],
                "waiting": limits["waiting"] + part["limits"]["waiting"],
                "slots_held": limits["slots_held"] + part["limits"]["slots_held"],
                "tasks_waiting": limits["tasks_waiting"] + part["limits"]["tasks_waiting"],
            },
            "oldest_waiting_age": max(ages) if ages else None,
        }
    return total


def _queue_all(pipe: ShardPipeline, queues: list[str]) -> None:
    """Queue the commands of every shard's part of each queue."""
    for queue in queues:
        for keys in shards.every():
            _queue_commands(pipe.on(keys.shard), keys, queue)


def _parse_all(
    queues: list[str], replies: list[Any], paused: set[str], now_ms: int
) -> list[QueueOverview]:
    """Parse what _queue_all() queued: each queue's shards merged into one overview."""
    n, count = QUEUE_REPLIES, shards.count()
    rows = []
    for i, queue in enumerate(queues):
        start = i * count * n
        parts = [
            _parse_queue(
                queue, replies[start + j * n : start + (j + 1) * n], queue in paused, now_ms
            )
            for j in range(count)
        ]
        rows.append(_merge(parts))
    return rows


def _clock_and_sets() -> tuple[int, set[str], set[str]]:
    """Return HOME's clock (ms) and the queues known to, and paused on, any shard."""
    pipe = ShardPipeline()
    pipe.on(shards.HOME).time()
    for keys in shards.every():
        pipe.on(keys.shard).smembers(keys.queues)
        pipe.on(keys.shard).smembers(keys.paused)
    now, *sets = execute(pipe)
    known = {str(q) for members in sets[0::2] for q in members}
    paused = {str(q) for members in sets[1::2] for q in members}
    return _now_ms(now), known, paused


def queue_overview(queue: str) -> QueueOverview:
    """Return one queue's depths, state counts, DLQ size, paused flag and counters (all shards).

    One pipelined round trip (per primary).
    """
    check_queue_name(queue)
    pipe = ShardPipeline()
    pipe.on(shards.HOME).time()
    for keys in shards.every():
        pipe.on(keys.shard).sismember(keys.paused, queue)
    _queue_all(pipe, [queue])
    replies = execute(pipe, raise_on_error=False)
    head = 1 + shards.count()
    _raise_errors(replies[:head])
    paused = {queue} if any(replies[1:head]) else set()
    return _parse_all([queue], replies[head:], paused, _now_ms(replies[0]))[0]


class QueuePage(TypedDict):
    """Queues in name order after a cursor; pass next_cursor as `after` for the next ones."""

    queues: list[QueueOverview]
    next_cursor: str | None
    total: int  # queues known in all


def overview_page(
    queues: list[str] | None = None, after: str | None = None, limit: int | None = None
) -> QueuePage:
    """Return queue_overview() of the known queues (or of `queues`) after `after`, by name.

    At most `limit` queues, and no more than the read budget pays for (QUEUE_REPLIES commands
    each, per shard): two round trips (per primary) whatever the number of queues.
    """
    budget = current()
    now, known, paused = _clock_and_sets()
    names = sorted(known) if queues is None else sorted({check_queue_name(q) for q in queues})
    rest = [n for n in names if after is None or n > after]
    fits = budget.left // (QUEUE_REPLIES * shards.count())
    size = min(len(rest), fits if limit is None else min(limit, fits))
    chosen = rest[:size]
    if size < len(rest) and (limit is None or size < limit):
        budget.partial = True
    next_cursor = chosen[-1] if chosen and size < len(rest) else None
    if not chosen:
        return {"queues": [], "next_cursor": next_cursor, "total": len(names)}
    pipe = ShardPipeline()
    _queue_all(pipe, chosen)
    rows = _parse_all(chosen, execute(pipe, budget, raise_on_error=False), paused, now)
    return {"queues": rows, "next_cursor": next_cursor, "total": len(names)}


def overview(queues: list[str] | None = None) -> list[QueueOverview]:
    """Return queue_overview() of every known queue (or of `queues`), in name order.

    Only as many as the read budget pays for: see overview_page() to page through the rest.
    """
    return overview_page(queues)["queues"]


# ----- workers and processes -------------------------------------------------------------


class WorkerInfo(TypedDict):
    """A worker as its last heartbeat described it."""

    id: str
    host: str | None
    pid: int | None
    queues: list[str]
    concurrency: int
    in_flight: int
    stuck: int  # timed-out sync handlers whose threads still hold a slot
    processed: int
    state: str  # running | draining | unknown (its info hash is gone)
    heartbeat: float  # epoch seconds
    heartbeat_age: float
    alive: bool  # heartbeat newer than 2 x lease timeout (the reaper's own test)


class ProcessInfo(TypedDict):
    """A scheduler or reaper process as its registry entry describes it."""

    id: str
    role: str
    heartbeat: float
    heartbeat_age: float
    alive: bool  # its process key has not expired


def _worker(worker_id: str, score: float, raw: dict[str, str], now: float) -> WorkerInfo:
    heartbeat = float(raw.get("heartbeat") or score)
    age = max(now - heartbeat, 0.0)
    return {
        "id": worker_id,
        "host": raw.get("host"),
        "pid": int(raw["pid"]) if raw.get("pid") else None,
        "queues": _json_or_raw(raw.get("queues")) or [],
        "concurrency": int(raw.get("concurrency") or 0),
        "in_flight": int(raw.get("in_flight") or 0),
        "stuck": int(raw.get("stuck") or 0),
        "processed": int(raw.get("processed") or 0),
        "state": raw.get("state") or "unknown",
        "heartbeat": heartbeat,
        "heartbeat_age": age,
        "alive": age < 2 * dtq_settings.lease_timeout,
    }


MAX_WORKERS = 200  # workers listed with their details at most (one HGETALL each)
MAX_PROCESSES = 50  # scheduler or reaper processes listed at most, per role


def workers(limit: int = MAX_WORKERS) -> list[WorkerInfo]:
    """Return registered workers, freshest heartbeat first (dead ones stay until forgotten)."""
    budget = current()
    keys = _keys()
    client = _home()
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.zrevrange(keys.workers, 0, max(limit, 1) - 1, withscores=True)
    pipe.zcard(keys.workers)
    now, members, total = execute(pipe, budget)
    if int(total) > len(members):
        budget.partial = True
    if not members:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id, _ in members:
        pipe.hgetall(keys.worker(worker_id))
    infos = execute(pipe, budget)
    now_s = _now_ms(now) / 1000
    return [
        _worker(worker_id, score, raw, now_s)
        for (worker_id, score), raw in zip(members, infos, strict=True)
    ]


def worker_counts() -> tuple[int, int]:
    """Return (registered, alive) worker counts in one round trip (alive: fresh heartbeat)."""
    keys = _keys()
    client = _home()
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.zcard(keys.workers)
    now, total = execute(pipe)
    # The zset's scores are the heartbeats: alive means newer than two lease timeouts.
    cutoff = _now_ms(now) / 1000 - 2 * dtq_settings.lease_timeout
    pipe = client.pipeline(transaction=False)
    pipe.zcount(keys.workers, f"({cutoff}", "+inf")
    (alive,) = execute(pipe)
    return int(total), int(alive)


def processes(role: str, limit: int = MAX_PROCESSES) -> list[ProcessInfo]:
    """Return the scheduler or reaper processes seen in the last hour, freshest first."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    budget = current()
    keys = _keys()
    client = _home()
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.zrevrange(keys.processes(role), 0, max(limit, 1) - 1, withscores=True)
    now, members = execute(pipe, budget)
    if not members:
        return []
    pipe = client.pipeline(transaction=False)
    for process_id, _ in members:
        pipe.exists(keys.process(role, process_id))
    now_s = _now_ms(now) / 1000
    return [
        {
            "id": process_id,
            "role": role,
            "heartbeat": score,
            "heartbeat_age": max(now_s - score, 0.0),
            "alive": bool(exists),
        }
        for (process_id, score), exists in zip(members, execute(pipe, budget), strict=True)
    ]


# ----- task lists and throughput ---------------------------------------------------------


class TaskPage(TypedDict):
    """One page of task records, newest first; pass next_cursor to get the next page."""

    tasks: list[dict[str, Any]]
    next_cursor: str | None


def list_tasks(
    queue: str, state: str | None = None, limit: int = 50, cursor: str | None = None
) -> TaskPage:
    """Return a queue's tasks, newest first by the time they entered their current state.

    With no state, every state's index is merged. Records that expired since they were
    indexed are left out, and a page holds no more records than the read budget pays for,
    so a page can be shorter than `limit` and still have a next page.
    """
    # Imported here: read_side.search imports read_side.dlq, which imports this module.
    from dtq.engine.read_side.search import search_tasks

    check_queue_name(queue)
    page = search_tasks([queue], state, limit, cursor)
    return {"tasks": page["tasks"], "next_cursor": page["next_cursor"]}


Minutes = list[tuple[int, list[dict[str, str]]]]  # (minute, each shard's bucket), oldest first


def read_minutes(minutes: int = 60) -> Minutes:
    """Read every shard's per-minute throughput buckets of the last `minutes`.

    One HGETALL per minute and shard covers every queue (the buckets are shared): minutes x
    SHARDS commands whatever the number of queues. Read once, it serves every sum below.
    """
    minutes = max(1, min(int(minutes), THROUGHPUT_MINUTES))
    # The buckets are named by the writer's clock (layout.shared_keys), so use ours too.
    current = int(time.time() // 60)
    span = range(current - minutes + 1, current + 1)
    every = shards.every()
    pipe = ShardPipeline()
    for minute in span:
        for keys in every:
            pipe.on(keys.shard).hgetall(keys.throughput(minute))
    replies = execute(pipe)
    n = len(every)
    return [(minute, replies[i * n : (i + 1) * n]) for i, minute in enumerate(span)]


def throughput(
    queue: str | None = None, minutes: int = 60, read: Minutes | None = None
) -> list[dict[str, int]]:
    """Return per-minute counters, oldest minute first, for one queue or (None) all queues.

    Each row holds 'minute' (epoch seconds of the minute's start) and one value per counter.
    `read`: buckets read_minutes() already read (then no command is sent).
    """
    rows = []
    for minute, buckets in read_minutes(minutes) if read is None else read:
        row = {"minute": minute * 60} | dict.fromkeys(THROUGHPUT_COUNTERS, 0)
        for bucket in buckets:
            for name, value in bucket.items():
                owner, _, counter = name.rpartition(":")  # queue names never contain ':'
                if queue is not None and owner != queue:
                    continue
                for name in protocol.counted_as(counter):
                    if name in THROUGHPUT_COUNTERS:
                        row[name] += int(value)
        rows.append(row)
    return rows


# ----- flow control ----------------------------------------------------------------------

MAX_LIMIT_MEMBERS = 1000  # slots and waiters read per queue for the per-family breakdown


class LimitFamily(TypedDict):
    """One limit family on a queue: the queue's own limit ('queue') or one task's."""

    queue: str
    family: str  # "queue", or the task name
    limit: int | None  # max concurrency (per key when the task has a concurrency_key)
    held: int  # slots held now (all keys)
    waiting: int  # tasks waiting for a slot (all keys)
    keys: int  # distinct keys with a slot held or a waiter


def _family_of(group: str) -> str:
    """Return the family of a limit group: 'queue', or the task name (its key left out)."""
    if group == "cq":
        return "queue"
    from dtq.engine import registry

    rest = group[3:]
    return rest if registry.get(rest) is not None else rest.rsplit("|", 1)[0]


def _family_limit(family: str, queue_limit: int | None) -> int | None:
    if family == "queue":
        return queue_limit
    from dtq.engine import registry

    return getattr(registry.get(family), "max_concurrency", None)


def limit_families(queue: QueueOverview) -> list[LimitFamily]:
    """Return the use of each limit family of a queue (no command when nothing is held)."""
    limits = queue["limits"]
    if not limits["slots_held"] and not limits["tasks_waiting"]:
        return []
    pipe = ShardPipeline()
    for keys in shards.every():
        pipe.on(keys.shard).zrange(keys.limit_held(queue["name"]), 0, MAX_LIMIT_MEMBERS - 1)
        pipe.on(keys.shard).zrange(keys.limit_wait(queue["name"]), 0, MAX_LIMIT_MEMBERS - 1)
    replies = execute(pipe)
    held = [m for members in replies[0::2] for m in members]
    waiting = [m for members in replies[1::2] for m in members]
    rows: dict[str, LimitFamily] = {}
    groups: dict[str, set[str]] = {}
    for members, field in ((held, "held"), (waiting, "waiting")):
        for member in members:
            group = str(member).split("\0", 1)[0]
            family = _family_of(group)
            row = rows.setdefault(
                family,
                {
                    "queue": queue["name"],
                    "family": family,
                    "limit": _family_limit(family, limits["max_concurrency"]),
                    "held": 0,
                    "waiting": 0,
                    "keys": 0,
                },
            )
            row[field] += 1  # type: ignore[literal-required]
            groups.setdefault(family, set()).add(group)
    for family, row in rows.items():
        row["keys"] = len(groups[family])
    return sorted(rows.values(), key=lambda r: r["family"])
