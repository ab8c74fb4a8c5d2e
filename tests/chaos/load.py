"""The load: a steady, seeded stream of submissions of every task class, idempotent
resubmits, and cancels at random moments. Every call and its answer goes to the evidence."""

from __future__ import annotations

import heapq
import itertools
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from redis.exceptions import RedisError

import dtq
from dtq.engine.errors import IdempotencyInProgress, SubmitError
from tests.chaos import ops, tasks
from tests.chaos.config import QUEUE, ChaosConfig
from tests.chaos.evidence import JsonLog

MAX_LAG = 1.0  # seconds behind schedule before missed submissions are dropped, not bunched


@dataclass(slots=True)
class Timeline:
    """Delayed actions (cancels, resubmits) ordered by due time."""

    heap: list[tuple[float, int, str, dict[str, Any]]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, due: float, kind: str, **data: Any) -> None:
        heapq.heappush(self.heap, (due, next(self.seq), kind, data))

    def pop_due(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            _, _, kind, data = heapq.heappop(self.heap)
            out.append((kind, data))
        return out


class Load:
    """Submits tasks at cfg.rate for cfg.duration seconds, from the calling thread."""

    def __init__(self, cfg: ChaosConfig, submissions: JsonLog, cancels: JsonLog) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed ^ 0x10AD)
        self.submissions, self.cancels = submissions, cancels
        self.timeline = Timeline()
        self.classes = list(cfg.mix)
        self.first = list(self.classes)  # every class at least once, early
        self.rng.shuffle(self.first)
        self.n = 0
        self.dropped = 0

    def run(self, start: float, stop: Any) -> None:
        """Submit until cfg.duration after start (time.monotonic) or until stop is set."""
        interval = 1.0 / self.cfg.rate
        next_at = start
        end = start + self.cfg.duration
        while not stop.is_set() and (now := time.monotonic()) < end:
            for kind, data in self.timeline.pop_due(now):
                self._delayed(kind, data)
            if now >= next_at:
                if now - next_at > MAX_LAG:  # Redis was down: do not burst to catch up
                    missed = int((now - next_at) / interval)
                    self.dropped += missed
                    next_at += missed * interval
                self.submit_one()
                next_at += interval
            stop.wait(max(min(next_at, self._next_delayed()) - time.monotonic(), 0.0))
        self.submissions.write("load_end", submitted=self.n, dropped=self.dropped)

    def _next_delayed(self) -> float:
        return self.timeline.heap[0][0] if self.timeline.heap else float("inf")

    # ----- submissions --------------------------------------------------------------------

    def submit_one(self) -> None:
        """Draw a class and submit one task of it, logging the answer."""
        cls = self.first.pop() if self.first else self._draw()
        self.n += 1
        if cls == "workflow":
            self.submit_workflow()
            return
        task, args, kwargs, meta = self._build(cls)
        row = self._send(task, args, kwargs, cls=cls, seq=self.n, **meta)
        if row.get("id") and row.get("result") == "ok":
            self._follow_up(cls, row)

    def _draw(self) -> str:
        return self.rng.choices(self.classes, [self.cfg.mix[c] for c in self.classes])[0]

    def _build(self, cls: str) -> tuple[dtq.Task, tuple[Any, ...], dict[str, Any], dict[str, Any]]:
        rng, short = self.rng, round(self.rng.uniform(0.01, 0.08), 3)
        if cls == "ordinary":
            return tasks.ordinary, (short,), {}, {"max_attempts": 3}
        if cls == "async":
            return tasks.async_ordinary, (short,), {}, {"max_attempts": 3}
        if cls == "flaky":
            failures = rng.randint(1, 2)
            task = tasks.flaky.using(max_attempts=failures + 2)
            return task, (failures,), {}, {"max_attempts": failures + 2, "failures": failures}
        if cls == "limited":
            seconds = round(rng.uniform(0.05, 0.3), 3)
            return tasks.limited, (seconds,), {}, {"max_attempts": 3}
        if cls == "poison":
            return tasks.poison, (), {}, {"max_attempts": 3}
        if cls == "crasher":
            return tasks.crasher, (), {}, {"max_attempts": 2}
        if cls in ("slow", "long"):
            seconds = self.cfg.slow_seconds if cls == "slow" else self.cfg.long_seconds
            task = tasks.async_sleeper if cls == "long" and rng.random() < 0.5 else tasks.sleeper
            return task, (seconds,), {}, {"max_attempts": 3, "seconds": seconds}
        if cls == "delayed":
            delay = round(rng.uniform(0.2, 4.0), 3)
            task = tasks.ordinary.using(run_after=timedelta(seconds=delay))
            return task, (short,), {}, {"max_attempts": 3, "delay": delay}
        assert cls == "idem", cls
        key = f"k{self.cfg.seed}-{self.n}"
        task = tasks.ordinary.using(idempotency_key=key)
        return task, (short,), {"key": key}, {"max_attempts": 3, "key": key}

    def submit_workflow(self) -> None:
        """Enqueue a chord of ordinary members and a gather callback; log it and its members.

        Each member is logged as an accepted submission (class wf_member / wf_callback), so
        every task check covers it; the workflow row is what workflow_fan_in checks.
        """
        size = self.rng.randint(2, 12)
        seconds = [round(self.rng.uniform(0.01, 0.08), 3) for _ in range(size)]
        header = dtq.group(tasks.ordinary.s(s) for s in seconds)
        sent = time.time()
        try:
            wf = dtq.chord(header, tasks.gather.s()).enqueue()
            members = [m.task_id for m in wf.members]
        except (SubmitError, RedisError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.submissions.write("submit", sent=sent, cls="workflow", result="error", error=error)
            return
        for i, task_id in enumerate(members):
            cls = "wf_callback" if i == size else "wf_member"
            args = [seconds[i]] if i < size else []
            self.submissions.write(
                "submit", sent=sent, args=args, cls=cls, seq=self.n, max_attempts=3,
                result="ok", id=task_id, state="QUEUED", workflow=wf.id,
            )  # fmt: skip
        self.submissions.write(
            "workflow", sent=sent, id=wf.id, members=members[:size], callback=members[size]
        )

    def _send(self, task: dtq.Task, args: Any, kwargs: Any, **meta: Any) -> dict[str, Any]:
        sent = time.time()
        try:
            result = task.enqueue(*args, **kwargs)
        except IdempotencyInProgress as exc:
            outcome = {"result": "in_progress", "id": exc.task_id}
        except (SubmitError, RedisError) as exc:
            outcome = {"result": "error", "error": f"{type(exc).__name__}: {exc}"}
        else:
            kind = "duplicate" if result.duplicate else "ok"
            outcome = {"result": kind, "id": result.id, "state": str(result.state)}
        return self.submissions.write("submit", sent=sent, args=list(args), **meta, **outcome)

    def _follow_up(self, cls: str, row: dict[str, Any]) -> None:
        """Plan resubmits of idempotency-keyed tasks and cancels of a few tasks."""
        now = time.monotonic()
        if cls == "idem":
            for _ in range(self.rng.randint(1, 3)):
                self.timeline.add(now + self.rng.uniform(0.0, 3.0), "resubmit", row=row)
        chance = 0.25 if cls == "long" else self.cfg.cancel_fraction
        if self.rng.random() < chance:
            horizon = self.cfg.long_seconds if cls == "long" else 3.0
            self.timeline.add(now + self.rng.uniform(0.0, horizon), "cancel", row=row)

    # ----- delayed actions ----------------------------------------------------------------

    def _delayed(self, kind: str, data: dict[str, Any]) -> None:
        row = data["row"]
        if kind == "resubmit":
            task = tasks.ordinary.using(idempotency_key=row["key"])
            self._send(
                task,
                row["args"],
                {"key": row["key"]},
                cls="idem",
                resubmit=True,
                key=row["key"],
                max_attempts=3,
            )
        else:
            self._cancel(row)

    def _cancel(self, row: dict[str, Any]) -> None:
        sent = time.time()
        try:
            reply = ops.cancel(row["id"], QUEUE, row.get("key") or "")
        except RedisError as exc:
            reply = ["error", f"{type(exc).__name__}: {exc}"]
        self.cancels.write("cancel", sent=sent, id=row["id"], cls=row["cls"], reply=reply)
