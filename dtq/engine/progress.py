"""Progress reported from inside a task: the latest value on the record, at a bounded rate.

A handler may report as often as it likes; the reporter writes at most one value per
INTERVAL seconds per attempt (one progress.lua call, which also emits TASK_PROGRESS) and
writes the last value it was given INTERVAL seconds after the previous write at the latest,
from a timer thread, so the final value always lands, even after the handler returned.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from redis.exceptions import RedisError

from dtq.engine import codec, gateway, layout, shards
from dtq.engine.read_side.tasks import keys_for

INTERVAL = 0.5  # seconds between two writes of one attempt, at least
MAX_MESSAGE = 200  # characters of a progress message kept

log = logging.getLogger("dtq.progress")


def check(fraction: Any, message: Any) -> tuple[float, str]:
    """Return (fraction, message) when valid, else raise ValueError saying what is wrong."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ValueError(f"progress fraction must be a number in 0..1, got {fraction!r}")
    if not math.isfinite(fraction) or not 0 <= fraction <= 1:
        raise ValueError(f"progress fraction must be in 0..1, got {fraction!r}")
    if not isinstance(message, str):
        raise ValueError(f"progress message must be a string, got {type(message).__name__}")
    return float(fraction), message[:MAX_MESSAGE]


def store(task_id: str, queue: str, attempt: int, fraction: float, message: str) -> int:
    """Write one progress value now; return progress.lua's reply (1 stored, 0 refused, 2 same)."""
    keys = keys_for(task_id)
    value = {"fraction": fraction, "message": message, "at": round(time.time(), 3)}
    ref = layout.TaskRef(task_id, queue)
    return gateway.progress(shards.client(keys.shard), keys, ref, attempt, codec.dumps(value))


class Reporter:
    """The rate-limited progress writer of one attempt (context.progress uses one)."""

    def __init__(self, task_id: str, queue: str, attempt: int, interval: float = INTERVAL):
        self.task_id, self.queue, self.attempt = task_id, queue, attempt
        self.interval = interval
        self._lock = threading.Lock()
        self._pending: tuple[float, str] | None = None
        self._last = -math.inf  # monotonic time of the last write
        self._timer: threading.Timer | None = None

    def report(self, fraction: float, message: str = "") -> None:
        """Record a value; write it now, or within `interval` if a write was just made."""
        value = check(fraction, message)
        with self._lock:
            self._pending = value
            wait = self._last + self.interval - time.monotonic()
            if wait <= 0:
                self._write_locked()
            elif self._timer is None:
                # Not a daemon: a worker that exits (burst, drain) still writes the last value.
                self._timer = threading.Timer(wait, self._trailing)
                self._timer.start()

    def _trailing(self) -> None:
        with self._lock:
            self._timer = None
            self._write_locked()

    def _write_locked(self) -> None:
        if self._pending is None:
            return
        fraction, message = self._pending
        self._pending = None
        self._last = time.monotonic()
        try:
            store(self.task_id, self.queue, self.attempt, fraction, message)
        except RedisError as exc:  # progress is advisory: it never fails the task
            log.warning("task_id=%s: progress not stored: %s", self.task_id, exc)
