"""The worker's runner: starts claimed attempts' handlers and owns what this worker holds."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any

from dtq.engine import failpoints, registry
from dtq.engine.errors import PermanentError
from dtq.engine.executor import (
    Attempt,
    HandlerPool,
    Outcome,
    execute,
    failure,
    is_plain_sync,
    run_sync_attempt,
)

log = logging.getLogger("dtq.worker")


class Runner:
    """Runs handlers on the pool or the loop; owns the held attempts, stuck threads and pool."""

    def __init__(
        self,
        worker_id: str,
        concurrency: int,
        pool: Executor,
        on_outcome: Callable[[Attempt, Outcome], None],
        on_change: Callable[[], None],
        on_all_stuck: Callable[[], None],
    ) -> None:
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._pool = pool
        self._on_outcome = on_outcome  # takes each outcome (the finalizer's outbox)
        self._on_change = on_change  # a slot freed: the fetch loop may read again
        self._on_all_stuck = on_all_stuck
        # Keyed by stream entry, not task id: after a lost lease this worker can hold the
        # zombie attempt and the task's next attempt at once, and must renew only the new one.
        self.held: dict[str, Attempt] = {}
        self.stuck: set[Attempt] = set()
        self.running = 0  # claimed attempts whose handler has not returned yet
        self.claimed = 0
        # Attempts claimed ahead of a free slot (prefetched), started in order as slots free.
        self.waiting: collections.deque[Attempt] = collections.deque()
        self.run_time = 0.0  # seconds a handler took lately (a moving average; 0: none yet)
        self._began: dict[str, float] = {}  # entry -> when its handler was handed to run
        self._inbox: collections.deque[tuple[Attempt, Outcome]] = collections.deque()
        self._inbox_wakeup = False

    @property
    def free(self) -> int:
        """How many more attempts this worker can claim now to start them at once."""
        return self.claimable(0)

    def claimable(self, ahead: int) -> int:
        """How many more attempts to claim now, `ahead` of them beyond the free slots.

        A slot is free once its handler returns, so the next batch is read and claimed while
        the last one is being finalized; outcomes awaiting finalize are capped at as many as
        may run and wait (held <= 2 x (concurrency + ahead)). Stuck threads keep their slot.
        """
        most = self._concurrency + ahead - len(self.stuck)
        return min(most - self.running - len(self.waiting), 2 * most - len(self.held))

    def start(self, att: Attempt) -> None:
        """Hold a claimed attempt and start its handler now, or once a slot frees."""
        self.held[att.entry] = att
        self.claimed += 1
        if self.waiting or self.running + len(self.stuck) >= self._concurrency:
            self.waiting.append(att)
        else:
            self._begin(att)

    def let_run(self) -> None:
        """Let the handlers just handed to the pool start now (after a batch of starts)."""
        if isinstance(self._pool, HandlerPool):
            self._pool.hand_over()

    def give_back_waiting(self) -> list[Attempt]:
        """Return (and stop holding as waiting) the attempts claimed ahead and not started."""
        waiting = list(self.waiting)
        self.waiting.clear()
        return waiting

    def _begin(self, att: Attempt) -> None:
        """Start an attempt's handler (on the loop's thread)."""
        self.running += 1
        self._began[att.entry] = time.monotonic()
        if is_plain_sync(att):
            # Fast path: no asyncio task or future per attempt; outcomes come back in batches.
            loop = asyncio.get_running_loop()
            # A context only for a handler that takes one (it is the only reader there).
            context = self._context(att) if _takes_context(att) else None
            args = (att, self._worker_id, context)
            if isinstance(self._pool, HandlerPool):  # not even a concurrent Future
                self._pool.run_plain(run_sync_attempt, args, partial(self._handed, loop, att))
                return
            future = self._pool.submit(run_sync_attempt, *args)
            future.add_done_callback(lambda f: self._from_thread(loop, att, f))
        else:
            att.handle = asyncio.create_task(self._run(att))

    def release(self, att: Attempt) -> None:
        """Stop holding an attempt whose outcome is recorded."""
        self.held.pop(att.entry, None)

    def in_pool(self, func: Callable[..., None], *args: Any) -> asyncio.Future[None]:
        """Run func on the pool (a finished hook may use the ORM); return its future."""
        return asyncio.get_running_loop().run_in_executor(self._pool, func, *args)

    def shutdown(self) -> None:
        """Stop the pool without waiting: threads still running are abandoned."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _context(self, att: Attempt) -> Any:
        from dtq.task import TaskContext

        return TaskContext(
            task_id=att.id,
            attempt=att.attempt,
            max_attempts=att.max_attempts,
            queue_name=att.queue,
            worker_id=self._worker_id,
            deadline=att.started_at + att.timeout if att.timeout else None,
            _cancel=att.cancel,
            idempotency_key=att.idem,  # a periodic firing's names its slot (scheduled_at)
        )

    def _from_thread(
        self, loop: asyncio.AbstractEventLoop, att: Attempt, future: Future[Outcome]
    ) -> None:
        """Hand a pool thread's outcome to the loop, waking it once per batch."""
        if future.cancelled():
            return  # hard stop: the attempt stays RUNNING until its lease runs out
        exc = future.exception()
        self._handed(loop, att, future.result() if exc is None else None, exc)

    def _handed(
        self,
        loop: asyncio.AbstractEventLoop,
        att: Attempt,
        outcome: Any,
        exc: BaseException | None,
    ) -> None:
        """Hand a pool thread's outcome (or its error) to the loop, waking it once per batch."""
        self._inbox.append((att, outcome if exc is None else self._broken(att, exc)))
        if not self._inbox_wakeup:
            self._inbox_wakeup = True
            _call_on_loop(loop, self._drain_inbox)

    def _drain_inbox(self) -> None:
        self._inbox_wakeup = False
        while self._inbox:
            self._finished(*self._inbox.popleft())

    async def _run(self, att: Attempt) -> None:
        context = self._context(att)
        try:
            outcome = await execute(att, self._worker_id, context, self._pool, self._on_stuck)
        except asyncio.CancelledError:
            return  # hard stop: the attempt stays RUNNING until its lease runs out
        except Exception as exc:
            outcome = self._broken(att, exc)
        self._finished(att, outcome)

    def _broken(self, att: Attempt, exc: BaseException) -> Outcome:
        """Fail an attempt whose outcome the executor could not build (say, bad record data).

        Without an outcome the attempt would stay held, and its lease renewed, for good.
        """
        log.error("task_id=%s attempt=%s: no outcome: %r", att.id, att.attempt, exc)
        text = f"the worker could not record this attempt's outcome: {exc!r}"
        return failure(att, self._worker_id, PermanentError(text), retryable=False)

    def _finished(self, att: Attempt, outcome: Outcome) -> None:
        att.done = True
        self.running -= 1
        began = self._began.pop(att.entry, None)
        if began is not None and outcome.kind != "skip":
            took = time.monotonic() - began
            self.run_time += (took - self.run_time) / (8 if self.run_time else 1)
        self._start_waiting()
        self._on_change()
        if failpoints.ACTIVE and outcome.kind != "skip":
            failpoints.hit("worker.after_handler")
        self._on_outcome(att, outcome)

    def _on_stuck(self, att: Attempt, future: Future[Any] | asyncio.Future[Any]) -> None:
        """Keep counting a timed-out sync handler's thread against capacity until it ends."""
        self.stuck.add(att)
        log.warning(
            "task_id=%s timed out after %ss; its thread keeps running (stuck=%s)",
            att.id,
            att.timeout,
            len(self.stuck),
        )
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda _: _call_on_loop(loop, self._unstick, att))
        if len(self.stuck) >= self._concurrency:
            log.error("every slot is held by a stuck thread: exiting so a supervisor restarts us")
            self._on_all_stuck()

    def _unstick(self, att: Attempt) -> None:
        self.stuck.discard(att)
        self._start_waiting()
        self._on_change()

    def _start_waiting(self) -> None:
        """Start attempts claimed ahead while slots are free, in the order they were claimed."""
        while self.waiting and self.running + len(self.stuck) < self._concurrency:
            self._begin(self.waiting.popleft())


def _call_on_loop(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """Run callback on the loop from a pool thread; after the stop, do nothing."""
    # RuntimeError: the loop closed under a handler that outlived the shutdown timeout.
    # Its attempt was counted in "left for the reaper"; the process ends without it.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _takes_context(att: Attempt) -> bool:
    return bool(getattr(registry.get(att.name), "takes_context", False))
