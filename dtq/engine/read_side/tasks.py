"""Read side: single task records and their results."""

from __future__ import annotations

import time
from typing import Any

from dtq.engine import codec, ids, shards
from dtq.engine.keys import Keys
from dtq.engine.read_side.budget import execute
from dtq.engine.state import TERMINAL_STATES

INT_FIELDS = ("attempt", "max_attempts", "priority", "band", "history_n")
MS_FIELDS = (
    "created_at",
    "enqueued_at",
    "started_at",
    "finished_at",
    "updated_at",
    "run_after",
    "expires_at",
    "lease",
)
JSON_FIELDS = ("payload", "retry", "error", "history", "skips", "progress")


def keys_for(task_id: str) -> Keys:
    """Return the Keys of the shard a task id belongs to."""
    return shards.of_task(task_id)


def decode_record(raw: dict[str, str]) -> dict[str, Any]:
    """Convert a raw task hash into typed values (ms -> seconds, JSON fields decoded)."""
    if raw.get("state") in TERMINAL_STATES and (raw.get("lease") or raw.get("delivery")):
        # A success leaves the claim's lease and delivery (finalize.lua): an ended task has
        # neither, as every other way to end writes.
        raw = {**raw, "lease": "", "delivery": ""}
    record: dict[str, Any] = dict(raw)
    for name in INT_FIELDS:
        if raw.get(name):
            record[name] = int(raw[name])
    for name in MS_FIELDS:
        value = raw.get(name)
        record[name] = int(value) / 1000 if value and value != "0" else None
    # Fields submit leaves out at their default (a record not changed since its submit).
    if record["run_after"] is None:
        record["run_after"] = record["created_at"]
    # The latest change: a claim and a success write no updated_at, their started_at and
    # finished_at are it (the claim.lua/finalize.lua hot path), and every other transition
    # writes updated_at at its time, later than any start or end before it.
    record["updated_at"] = max(
        (t for t in (record["updated_at"], record["started_at"], record["finished_at"]) if t),
        default=record["created_at"],
    )
    record.setdefault("history_n", 0)
    record.setdefault("priority", 0)
    for name in JSON_FIELDS:
        record[name] = _json_or_raw(raw.get(name))
    record["timeout"] = float(raw["timeout"]) if raw.get("timeout") else None
    record["cancel_requested"] = raw.get("cancel") == "1"
    _add_success_entry(record)
    return record


def _add_success_entry(record: dict[str, Any]) -> None:
    # finalize.lua stores no history entry for a success: the record's own fields are it.
    history = record.get("history")
    if record.get("state") != "SUCCEEDED" or not isinstance(history, list | None):
        return
    history = history or []
    attempt = record.get("attempt")
    if not any(isinstance(h, dict) and h.get("attempt") == attempt for h in history):
        history.append(
            {
                "attempt": attempt,
                "worker": record.get("worker"),
                "started_at": record.get("started_at"),
                "ended_at": record.get("finished_at"),
                "outcome": "succeeded",
            }
        )
    record["history"] = history


def _json_or_raw(value: str | None) -> Any:
    # A damaged field is shown as it is rather than hiding the whole record.
    if not value:
        return None
    try:
        return codec.loads(value)
    except ValueError:
        return value


def get_task(task_id: str) -> dict[str, Any] | None:
    """Return a task's record with its result (key 'result', JSON-decoded), or None."""
    if not ids.is_valid(task_id):
        return None
    keys = keys_for(task_id)
    pipe = shards.client(keys.shard).pipeline(transaction=False)
    pipe.hgetall(keys.task(task_id))
    pipe.get(keys.result(task_id))
    raw, result = execute(pipe)
    if not raw:
        return None
    record = decode_record(raw)
    record["has_result"] = result is not None
    record["result"] = codec.loads(result) if result is not None else None
    return record


def durations(record: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """Return a decoded record's wait and run times in seconds, and each attempt's run time.

    wait: from entering the queue to the start of the latest attempt; run: from that start to
    its end (so far, while it runs). None where the task has not got that far.
    """
    started, finished = record.get("started_at"), record.get("finished_at")
    queued = record.get("enqueued_at") or record.get("created_at")
    wait = started - queued if started and queued and started >= queued else None
    end = finished if finished and started and finished >= started else None
    if end is None and started and record.get("state") == "RUNNING":
        end = time.time() if now is None else now
    raw = record.get("history")
    history: list[Any] = raw if isinstance(raw, list) else []
    attempts = []
    for entry in history:
        if isinstance(entry, dict) and entry.get("started_at") and entry.get("ended_at"):
            run = float(entry["ended_at"]) - float(entry["started_at"])
            attempts.append({"attempt": entry.get("attempt"), "run_seconds": round(run, 3)})
    return {
        "wait_seconds": None if wait is None else round(wait, 3),
        "run_seconds": None if end is None or not started else round(end - started, 3),
        "attempt_runs": attempts,
    }
