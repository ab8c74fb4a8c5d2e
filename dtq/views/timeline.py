"""A task's event timeline, rebuilt from its record (the event stream is global and capped)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypedDict


class Moment(TypedDict):
    """One line of the timeline."""

    at: datetime
    kind: str
    label: str
    detail: str


def _when(value: Any) -> datetime | None:
    if not isinstance(value, (int, float)) or value <= 0:
        return None
    return datetime.fromtimestamp(value, UTC)


def _add(out: list[Moment], at: Any, kind: str, label: str, detail: str = "") -> None:
    when = _when(at)
    if when is not None:
        out.append({"at": when, "kind": kind, "label": label, "detail": detail})


def _attempt(out: list[Moment], entry: dict[str, Any]) -> None:
    outcome = str(entry.get("outcome") or "")
    if outcome == "replayed":
        _add(out, entry.get("at"), "replay", "replayed from the DLQ", str(entry.get("to") or ""))
        return
    if outcome == "retried":
        to = str(entry.get("queue") or "")
        _add(out, entry.get("at"), "replay", "retried by an operator", to)
        return
    number = entry.get("attempt", "?")
    worker = entry.get("worker") or "?"
    _add(out, entry.get("started_at"), "start", f"attempt {number} started", f"worker {worker}")
    error = entry.get("error")
    detail = f"{error}: {entry.get('message', '')}" if error else ""
    _add(out, entry.get("ended_at"), outcome or "end", f"attempt {number} {outcome}", detail)


SKIP_REASONS = {
    "lease_expired": "its lease ran out before the handler could start (worker frozen or late)",
    "lease_lost": "a lease renewal found it taken over before the handler started",
}


def _skip(out: list[Moment], entry: dict[str, Any]) -> None:
    reason = str(entry.get("reason") or "")
    detail = f"worker {entry.get('worker') or '?'}: {SKIP_REASONS.get(reason, reason)}"
    _add(out, entry.get("at"), "skip", f"attempt {entry.get('attempt', '?')} not started", detail)


def of(record: dict[str, Any]) -> list[Moment]:
    """Return a record's moments, oldest first: submission, attempts, skips, cancel, end."""
    out: list[Moment] = []
    _add(out, record.get("created_at"), "submit", f"submitted to {record.get('queue', '?')}")
    run_after = record.get("run_after")
    if run_after and run_after > (record.get("created_at") or 0):
        _add(out, record.get("created_at"), "schedule", "scheduled", f"due {_when(run_after)}")
    for entry in record.get("history") or []:
        if isinstance(entry, dict):
            _attempt(out, entry)
    skips = record.get("skips")
    for entry in skips if isinstance(skips, list) else []:
        if isinstance(entry, dict):
            _skip(out, entry)
    if record.get("cancel_requested"):
        reason = record.get("cancel_reason") or ""
        _add(out, record.get("updated_at"), "cancel", "cancel requested", reason)
    state = str(record.get("state") or "")
    if record.get("finished_at"):
        _add(out, record.get("finished_at"), state.lower(), state)
    elif state:
        _add(out, record.get("updated_at"), state.lower(), f"now {state}")
    out.sort(key=lambda m: m["at"])
    return out
