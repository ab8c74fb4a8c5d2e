"""Values shared by Python and the Lua scripts, written into every script's prelude by scripts.py.

This is their one source: a Lua script reads them as globals-turned-locals of lib.lua's prelude
(STATE_ORDER, TERMINAL, COUNTER, LATENCY_BUCKETS and the REPLY_* builders), never as literals.
"""

from __future__ import annotations

from dtq.engine.state import TERMINAL_STATES, TaskState

# The order of a queue block's nine state-index keys (layout.py and lib.lua's qkey offsets).
STATE_ORDER = (
    TaskState.PENDING,
    TaskState.QUEUED,
    TaskState.RUNNING,
    TaskState.RETRYING,
    TaskState.SUCCEEDED,
    TaskState.FAILED,
    TaskState.DEAD_LETTERED,
    TaskState.CANCELLED,
    TaskState.EXPIRED,
)

# The queue counter a move into each state adds one to (lib.lua's move()).
COUNTER_OF_STATE = {
    TaskState.QUEUED: "queued",
    TaskState.RUNNING: "started",
    TaskState.RETRYING: "retried",
    TaskState.SUCCEEDED: "succeeded",
    TaskState.FAILED: "failed",
    TaskState.DEAD_LETTERED: "dead_lettered",
    TaskState.CANCELLED: "cancelled",
    TaskState.EXPIRED: "expired",
}

# Every counter of a queue's stats hash, in the order the read side shows them.
COUNTERS = (
    "submitted",
    "queued",
    "started",
    "succeeded",
    "failed",
    "retried",
    "dead_lettered",
    "cancelled",
    "expired",
    "absorbed",
    "reclaimed",
    "stale",
    "start_skipped",
    "replayed",
    "discarded",
    "purged",
    "limit_waits",  # flow control: a task held back by a limit (engine/lua/lib.lua's admit)
    "limit_woken",  # flow control: a waiter handed a freed slot
)

# submit_one.lua and submit.lua count a task QUEUED at submit once, in this field, for one
# 'submitted' and one 'queued' (the hottest script then sends one HINCRBY per counter place,
# not two); a stats hash or per-minute bucket is read through fold_counters.
SUBMITTED_QUEUED = "submitted_queued"


def counted_as(field: str) -> tuple[str, ...]:
    """Return the counters a stored counter field adds to (SUBMITTED_QUEUED: two)."""
    return ("submitted", "queued") if field == SUBMITTED_QUEUED else (field,)


def fold_counters(counters: dict[str, int]) -> dict[str, int]:
    """Fold SUBMITTED_QUEUED into 'submitted' and 'queued' of counters (in place); return it."""
    both = counters.pop(SUBMITTED_QUEUED, 0)
    if both:
        for name in counted_as(SUBMITTED_QUEUED):
            counters[name] = counters.get(name, 0) + both
    return counters


# Upper bounds (ms) of the latency histogram buckets in a queue's stats hash (lib.lua observe()).
LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)


def lua_prelude() -> str:
    """Return the Lua paragraphs that define these constants (one paragraph per name)."""
    order = ", ".join(f"{s} = {i}" for i, s in enumerate(STATE_ORDER, 1))
    terminal = ", ".join(f"{s} = true" for s in STATE_ORDER if s in TERMINAL_STATES)
    counter = ", ".join(f"{s} = '{c}'" for s, c in COUNTER_OF_STATE.items())
    buckets = ", ".join(str(b) for b in LATENCY_BUCKETS_MS)
    return "\n\n".join(
        [
            f"local STATE_ORDER = {{{order}}}",
            f"local TERMINAL = {{{terminal}}}",
            f"local COUNTER = {{{counter}}}",
            f"local LATENCY_BUCKETS = {{{buckets}}}",
        ]
    )
