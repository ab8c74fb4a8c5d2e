"""Fire periodic schedules: each (schedule, slot) claimed in one script, fired once.

Exactly once per slot with any number of schedulers comes from two locks that back each
other up. A claim (periodic_claim.lua) lets one scheduler at a time decide a slot; the task it
submits carries the idempotency key ``dtq.periodic:<name>:<slot ms>``, so a scheduler that dies
between submit and commit, or loses its claim while paused, leaves nothing a second submission
could duplicate; the commit (periodic_commit.lua) moves the schedule's cursor past the slot.
Redis TIME is the clock: every slot is compared with the server's time, never a host's.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dtq.engine import codec, gateway, ids, shards
from dtq.engine.cron import Timing
from dtq.engine.errors import (
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidTaskError,
    SubmitError,
)
from dtq.engine.keys import Keys, check_queue_name
from dtq.engine.state import TERMINAL_STATES
from dtq.engine.submit import Submission, submit

NAME = re.compile(r"^[A-Za-z0-9_.@+=-]{1,150}$")
KEY_HEAD = "dtq.periodic"
GRACE_MS = 30_000  # a slot later than this is "missed": its schedule's catch_up decides
CLAIM_LEASE_MS = 5_000  # how long a claim keeps other schedulers off a slot
SLOTS_PER_PASS = 100  # bounds one pass; the next pass goes on
LOG_LENGTH = 200  # firings and skips kept per schedule
CATCH_UP = ("none", "latest", "all")
OVERLAP = ("allow", "skip", "buffer_one")
log = logging.getLogger("dtq.scheduler")


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One periodic schedule: when, which task with which arguments, and its policies."""

    name: str
    timing: Timing
    task_name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: the task's own queue
    catch_up: str = "latest"
    catch_up_window: timedelta = timedelta(days=1)  # catch_up="all" fires missed slots this old
    overlap: str = "allow"
    source: str = "code"  # or "database"
    description: str = ""

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise InvalidTaskError(
                f"schedule name {self.name!r}: use 1-150 letters, digits and _ . @ + = - "
                "(pass name= to dtq.periodic)"
            )
        if self.queue is not None:
            try:
                check_queue_name(self.queue)
            except ValueError as exc:
                raise InvalidTaskError(str(exc)) from None
        if self.catch_up not in CATCH_UP:
            raise InvalidTaskError(f"catch_up must be one of {CATCH_UP}, got {self.catch_up!r}")
        if self.overlap not in OVERLAP:
            raise InvalidTaskError(f"overlap must be one of {OVERLAP}, got {self.overlap!r}")
        if self.catch_up_window.total_seconds() <= 0:
            raise InvalidTaskError("catch_up_window must be positive")
        try:
            codec.encode_payload(list(self.args), dict(self.kwargs), 1 << 20)
        except SubmitError as exc:
            raise InvalidTaskError(f"schedule {self.name}: {exc}") from None

    def submission(self, slot_ms: int, key: str | None = None) -> Submission:
        """Build the submission of one firing (InvalidTaskError if the task is unknown)."""
        from dtq.engine import registry

        task = registry.get(self.task_name)
        if task is None or not hasattr(task, "submission"):
            raise InvalidTaskError(f"schedule {self.name}: no task named {self.task_name!r}")
        sub = task.submission(tuple(self.args), dict(self.kwargs))
        sub = replace(sub, idempotency_key=key or idempotency_key(self.name, slot_ms), delay=0.0)
        return replace(sub, queue=self.queue) if self.queue else sub


def idempotency_key(name: str, slot_ms: int) -> str:
    """Return the idempotency key of a schedule's firing for one slot."""
    return f"{KEY_HEAD}:{name}:{slot_ms}"


def slot_of(key: str) -> datetime | None:
    """Return the slot a firing's idempotency key names (None for any other key)."""
    parts = key.split(":")
    if len(parts) < 3 or parts[0] != KEY_HEAD or not parts[2].isdigit():
        return None
    return datetime.fromtimestamp(int(parts[2]) / 1000, UTC)


def schedule_of(key: str) -> str | None:
    """Return the schedule a firing's idempotency key names (None for any other key)."""
    return key.split(":")[1] if slot_of(key) is not None else None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one slot: fire it, or skip it (with why); earlier skips ride along."""

    slot: int
    fire: bool
    reason: str = ""
    skipped: tuple[dict[str, Any], ...] = ()


def plan(schedule: Schedule, cursor: int, now: int) -> list[Decision]:
    """Decide the slots in (cursor, now] by the catch_up policy (overlap is decided later)."""
    timing = schedule.timing
    first = timing.next_after(cursor)
    if first > now:
        return []
    window = schedule.catch_up_window if schedule.catch_up == "all" else None
    oldest = now - (int(window.total_seconds() * 1000) if window else GRACE_MS)
    out: list[Decision] = []
    if first < oldest:  # missed while no scheduler ran (or Redis was unreachable)
        last = timing.last_before(oldest)
        assert last is not None and last >= first
        reason = f"missed (catch_up={schedule.catch_up})"
        if schedule.catch_up == "latest":
            skipped = _range(first, timing.last_before(last), reason)
            out.append(Decision(last, True, skipped=skipped))
        else:
            out.append(
                Decision(last, False, reason, _range(first, timing.last_before(last), reason))
            )
        cursor = last
    recent = timing.slots(cursor, now, SLOTS_PER_PASS)
    out += [Decision(slot, True) for slot in recent]
    return out


def _range(first: int, last: int | None, reason: str) -> tuple[dict[str, Any], ...]:
    if last is None or last < first:
        return ()
    return ({"slot": last, "from": first, "outcome": "skipped", "reason": reason},)


class Firing:
    """One scheduler's share of firing schedules; run_once() is called by each pass."""

    def __init__(self, keys: Keys, owner: str) -> None:
        self.keys = keys
        self.owner = owner
        self.next_due_ms: int | None = None  # the earliest slot seen, in Redis time
        self.redis_now_ms = 0

    def run_once(self, client: Any, schedules: list[Schedule]) -> int:
        """Fire or skip every due slot of these schedules; return how many were decided."""
        now = redis_ms(client)
        self.redis_now_ms, self.next_due_ms = now, None
        states = _read_states(client, self.keys, schedules)
        decided = 0
        for schedule, state in zip(schedules, states, strict=True):
            if state.get("paused") == "1":
                continue
            if "cursor" not in state:  # first sight: slots from now on are its own
                client.hsetnx(self.keys.periodic(schedule.name), "cursor", now)
                state["cursor"] = client.hget(self.keys.periodic(schedule.name), "cursor")
            decided += self._run_schedule(client, schedule, state, now)
        return decided

    def _run_schedule(
        self, client: Any, schedule: Schedule, state: dict[str, str], now: int
    ) -> int:
        cursor = int(state["cursor"])
        decisions = plan(schedule, cursor, now)
        buffered = int(state["buffered"]) if state.get("buffered") else None
        last_task = state.get("last_task") or ""
        done = 0
        if buffered is not None and _finished(client, last_task):
            decisions.insert(0, Decision(buffered, True))
        for decision in decisions:
            outcome = self._decide(client, schedule, decision, last_task, buffered)
            if outcome is None:
                break  # busy elsewhere, paused, or not submittable now: a later pass goes on
            kind, task_id = outcome
            done += 1
            if kind == "fired":
                last_task = task_id
                if decision.slot == buffered:
                    buffered = None
            elif kind == "buffered":
                buffered = decision.slot
        if done < len(decisions) or buffered is not None:
            self._note(now + 200)  # a peer holds a claim, or a buffered slot waits: look again
        cursor = max([cursor, *(d.slot for d in decisions[:done])])
        self._note(schedule.timing.next_after(cursor))
        return done

    def _decide(
        self,
        client: Any,
        schedule: Schedule,
        decision: Decision,
        last_task: str,
        buffered: int | None,
    ) -> tuple[str, str] | None:
        name, slot = schedule.name, decision.slot
        claim = gateway.periodic_claim(client, self.keys, name, self.owner, slot, CLAIM_LEASE_MS)
        if _str(claim[0]) == "done":
            return ("done", "")
        if _str(claim[0]) != "ok":
            return None
        kind, task_id, reason = "skipped", "", decision.reason
        if decision.fire:
            blocked = _overlap(client, schedule, last_task, slot == buffered)
            if blocked == "buffer":
                kind = "skipped" if buffered is not None else "buffered"
                reason = "buffer full" if buffered is not None else f"waiting for {last_task}"
            elif blocked:
                reason = blocked
            else:
                fired = self._submit(schedule, slot)
                if fired is None:
                    return None
                kind, task_id, reason = fired
        entry = {"slot": slot, "outcome": kind, "task": task_id, "reason": reason}
        lines = [codec.dumps({**e, "at": self.redis_now_ms}) for e in (*decision.skipped, entry)]
        reply = gateway.periodic_commit(
            client, self.keys, name, self.owner, slot, kind, task_id, LOG_LENGTH, lines
        )
        if _str(reply[0]) == "lost":
            log.info("schedule=%s slot=%s: claim taken over by %s", name, slot, _str(reply[1]))
        return (kind, task_id)

    def _submit(self, schedule: Schedule, slot: int) -> tuple[str, str, str] | None:
        """Submit one firing; return (decision, task id, reason), or None to try again later."""
        try:
            accepted = submit(schedule.submission(slot))
        except InvalidTaskError as exc:
            return ("skipped", "", f"not submittable: {exc}")
        except (IdempotencyInProgress, IdempotencyConflict) as exc:
            return ("fired", exc.task_id, "")  # submitted already: by us before a crash, or a peer
        except SubmitError as exc:  # queue full, writes refused: the slot stays open
            log.warning("schedule=%s slot=%s not submitted: %s", schedule.name, slot, exc)
            return None
        return ("fired", accepted.id, "")

    def _note(self, due_ms: int) -> None:
        if self.next_due_ms is None or due_ms < self.next_due_ms:
            self.next_due_ms = due_ms

    def seconds_to_next(self) -> float | None:
        """Return how long until the earliest slot seen in the last pass (None: no schedule)."""
        if self.next_due_ms is None:
            return None
        return max(self.next_due_ms - self.redis_now_ms, 0) / 1000


def redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _read_states(client: Any, keys: Keys, schedules: list[Schedule]) -> list[dict[str, str]]:
    pipe = client.pipeline(transaction=False)
    for schedule in schedules:
        pipe.hgetall(keys.periodic(schedule.name))
    return [text(state) for state in pipe.execute()]


def text(state: dict[Any, Any]) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in state.items()}


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def task_state(client: Any, task_id: str) -> str | None:
    """Return a task's state, or None when its record is gone."""
    return task_states(client, [task_id])[0]


def task_states(client: Any, task_ids: list[str]) -> list[str | None]:
    """Return the state of each task (None when its record is gone), a round trip per shard.

    client is HOME's; a task of another shard is read through that shard's client (on a
    cluster its slot may be on another primary).
    """
    by_shard: dict[int, list[int]] = {}
    for position, task_id in enumerate(task_ids):
        if task_id and ids.is_valid(task_id):
            by_shard.setdefault(ids.shard_of(task_id), []).append(position)
    out: list[str | None] = [None] * len(task_ids)
    for shard, positions in by_shard.items():
        keys = shards.keys(shard)
        pipe = (client if shard == shards.HOME else shards.client(shard)).pipeline(False)
        for position in positions:
            pipe.hget(keys.task(task_ids[position]), "state")
        for position, value in zip(positions, pipe.execute(), strict=True):
            out[position] = None if value is None else _str(value)
    return out


def _finished(client: Any, task_id: str) -> bool:
    state = task_state(client, task_id)
    return state is None or state in TERMINAL_STATES


def _overlap(client: Any, schedule: Schedule, last_task: str, is_buffered: bool) -> str:
    """Return '' to fire, 'buffer' to hold the slot, or why the slot is skipped."""
    if schedule.overlap == "allow" or is_buffered or not last_task:
        return ""
    state = task_state(client, last_task)
    if state is None or state in TERMINAL_STATES:
        return ""
    if schedule.overlap == "buffer_one":
        return "buffer"
    return f"previous firing {last_task} still {state}"
