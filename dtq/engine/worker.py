"""The worker: read and claim in batches, run handlers, finalize in batches, heartbeat."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import clock, failpoints, gateway
from dtq.engine.connection import new_async_client
from dtq.engine.direct import AsyncCaller
from dtq.engine.errors import PermanentError
from dtq.engine.executor import (
    Attempt,
    Outcome,
    execute,
    failure,
    has_finished_hook,
    is_plain_sync,
    report_finished,
    run_sync_attempt,
    start_by,
)
from dtq.engine.keys import BANDS, Keys
from dtq.engine.liveness import LivenessMixin
from dtq.engine.reading import ReadingMixin
from dtq.engine.refusals import WriteRefusals

log = logging.getLogger("dtq.worker")
MAX_BACKOFF = 5.0  # seconds between retries of a loop while Redis is down or refuses writes


class Worker(LivenessMixin, ReadingMixin):
    """Runs tasks from a set of queues until stopped; one asyncio loop per process."""

    def __init__(
        self,
        queues: list[str],
        *,
        concurrency: int = 16,
        worker_id: str | None = None,
        burst: bool = False,
        max_tasks: int | None = None,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.queues = list(dict.fromkeys(queues))
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}.{os.getpid()}.{os.urandom(3).hex()}"
        self.burst = burst
        self.max_tasks = max_tasks
        self.shutdown_timeout = shutdown_timeout
        self.keys = Keys(dtq_settings.KEY_PREFIX, 0)
        # Keyed by stream entry, not task id: after a lost lease this worker can hold the
        # zombie attempt and the task's next attempt at once, and must renew only the new one.
        self.held: dict[str, Attempt] = {}
        self.stuck: set[Attempt] = set()
        self.outbox: list[tuple[Attempt, Outcome]] = []
        self.unclaimed: list[
            gateway.Entry
        ] = []  # read entries whose claim failed: sent again first
        self.refusals = WriteRefusals(log)  # shared by the loops: one log line per change
        self.processed = 0
        self.running = 0  # claimed attempts whose handler has not returned yet
        self.claimed = 0
        self.stopping = False
        self.exit_code = 0
        self.abandoned = 0  # attempts and stuck threads still held when the loop stopped
        self._client: Any = None
        self._blocked_id: int | None = None  # our client id while blocked in a read
        self._unblocking: asyncio.Task[None] | None = None
        self._stream_blocks = {
            self.keys.stream(queue, band): (qi, band)
            for qi, queue in enumerate(self.queues, 1)
            for band in BANDS
        }
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="dtq-task")
        self._changed: asyncio.Event | None = None
        self._flush_now: asyncio.Event | None = None
        self._inbox: collections.deque[tuple[Attempt, Outcome]] = collections.deque()
        self._inbox_wakeup = False
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._hooks: set[asyncio.Future[None]] = set()  # finished hooks still running

    # ----- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped by a signal, --burst or --max-tasks; return the exit code.

        When `abandoned` is set afterwards, handler threads may still run: the caller must end
        the process with os._exit (dtq_worker does), not wait for them, or they would run on
        beside the attempts the reaper hands to other workers.
        """
        # Django and the task modules are loaded for good: keep the garbage collector from
        # walking them again in every full collection (a pause that shows in tail latency).
        gc.freeze()
        asyncio.run(self.main())
        self._exit_on_signal()
        return self.exit_code

    async def main(self) -> None:
        """Start the fetch, flush and heartbeat loops and wait for a clean stop."""
        self._client = new_async_client()
        # The fetch and flush loops each own a connection for their script calls.
        self._fetcher = AsyncCaller(self._client)
        self._flusher = AsyncCaller(self._client)
        self._blocker = AsyncCaller(self._client)  # blocking reads
        self._beater = AsyncCaller(self._client)  # the heartbeat's lease renewals
        self._changed = asyncio.Event()
        self._event_loop = asyncio.get_running_loop()
        self._flush_now = asyncio.Event()
        self._install_signals()
        log.info(
            "worker started worker_id=%s queues=%s concurrency=%s",
            self.worker_id,
            ",".join(self.queues),
            self.concurrency,
        )
        loops = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._flush_loop()),
        ]
        try:
            await self._fetch_loop()
            await self._drain()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            if self._hooks:
                await asyncio.wait(set(self._hooks), timeout=self.shutdown_timeout)
            await self._deregister()
            await self._fetcher.aclose()
            await self._flusher.aclose()
            await self._blocker.aclose()
            await self._beater.aclose()
            await self._client.aclose()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self.abandoned = len(self.held) + len(self.stuck)
            log.info("worker stopped worker_id=%s processed=%s", self.worker_id, self.processed)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)

    def _exit_on_signal(self) -> None:
        """Keep "a second signal stops now" after the loop closed (it took its handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def stop_now(signum: int, frame: Any) -> None:
            log.warning("signal received while exiting: stopping now")
            os._exit(1)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop_now)

    def _on_signal(self) -> None:
        if self.stopping:
            log.warning("second signal: stopping now; held tasks stay for the reaper")
            os._exit(1)
        log.info("signal received: draining (send again to stop now)")
        self.stop()

    def stop(self) -> None:
        """Stop taking new tasks; running ones finish and are finalized."""
        self.stopping = True
        if self._blocked_id is not None:
            self._unblock()
        self._poke()

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while (self.held or self.outbox) and time.monotonic() < deadline:
            self._flush_now.set()  # type: ignore[union-attr]
            await asyncio.sleep(0.01)
        await self._flush()
        if self.held:
            log.warning("shutdown timeout: %s task(s) left for the reaper", len(self.held))

    # ----- fetching --------------------------------------------------------------------

    @property
    def free(self) -> int:
        """How many more attempts this worker can claim now.

        A slot is free once its handler returns, so the next batch is read and claimed while
        the last one is being finalized; entries awaiting finalize are capped at one more
        batch (held <= 2 x concurrency). Stuck threads keep their slot.
        """
        running = self.concurrency - self.running - len(self.stuck)
        return min(running, 2 * self.concurrency - len(self.held) - len(self.stuck))

    async def _fetch_loop(self) -> None:
        backoff = 0.05
        while not self.stopping:
            try:
                await self._fetch_once()
                backoff = 0.05
            except RedisError as exc:
                self.refusals.report(exc, "fetching", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _fetch_once(self) -> None:
        assert self._changed is not None
        if self.unclaimed:
            entries, self.unclaimed = self.unclaimed, []
            await self._claim(entries)
            return
        capacity = self.free
        if self.max_tasks:
            capacity = min(capacity, self.max_tasks - self.claimed)
            if capacity <= 0 and self.claimed >= self.max_tasks:
                self.stop()  # the drain finalizes what was claimed
                return
        if capacity <= 0:
            self._changed.clear()
            await self._changed.wait()
            return
        entries, watch = await self._read(capacity)
        if not entries and watch and not self.burst:
            entries = await self._wait_for_new(watch, capacity)
            if not entries:
                return
        if entries:
            if failpoints.ACTIVE:
                failpoints.hit("worker.after_read")
            await self._claim(entries)
        elif self.burst and not self.held and not self.outbox:
            self.stop()
        else:
            # Burst mode with tasks still running, or every queue paused: wait for a slot to
            # free, a stop, or the timeout.
            await self._sleep_or_poke(dtq_settings.BLOCK_TIMEOUT)

    async def _sleep_or_poke(self, timeout: float) -> None:
        assert self._changed is not None
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def _claim(self, entries: list[gateway.Entry]) -> None:
        lease = dtq_settings.lease_timeout
        sent = clock.now()  # before the call: Redis starts the lease later than this
        try:
            attempts = await gateway.claim(
                self._fetcher, self.keys, self.queues, entries, self.worker_id, int(lease * 1000)
            )
        except RedisError:  # the entries sit in our pending list, where no read finds them
            self.unclaimed = entries
            raise
        for att in attempts:
            att.lease_until = start_by(sent, lease)
        if failpoints.ACTIVE and attempts:
            failpoints.hit("worker.after_claim")  # before any handler can start on the pool
        for att in attempts:
            self._start(att)

    # ----- running ---------------------------------------------------------------------

    def _start(self, att: Attempt) -> None:
        self.held[att.entry] = att
        self.claimed += 1
        self.running += 1
        if is_plain_sync(att):
            # Fast path: no asyncio task or future per attempt; outcomes come back in batches.
            future = self._pool.submit(run_sync_attempt, att, self.worker_id, self._context(att))
            future.add_done_callback(lambda f: self._from_thread(att, f))
        else:
            att.handle = asyncio.create_task(self._run(att))

    def _context(self, att: Attempt) -> Any:
        from dtq.task import TaskContext

        return TaskContext(
            task_id=att.id,
            attempt=att.attempt,
            max_attempts=att.max_attempts,
            queue_name=att.queue,
            worker_id=self.worker_id,
            deadline=att.started_at + att.timeout if att.timeout else None,
            _cancel=att.cancel,
            idempotency_key=att.idem,  # a periodic firing's names its slot (scheduled_at)
        )

    def _from_thread(self, att: Attempt, future: Future[Outcome]) -> None:
        """Hand a pool thread's outcome to the loop, waking it once per batch."""
        if future.cancelled():
            return  # hard stop: the attempt stays RUNNING until its lease runs out
        exc = future.exception()
        outcome = future.result() if exc is None else self._broken(att, exc)
        self._inbox.append((att, outcome))
        if not self._inbox_wakeup:
            self._inbox_wakeup = True
            self._call_on_loop(self._drain_inbox)

    def _call_on_loop(self, callback: Any, *args: Any) -> None:
        """Run callback on the loop from a pool thread; after the stop, do nothing."""
        assert self._event_loop is not None
        # RuntimeError: the loop closed under a handler that outlived the shutdown timeout.
        # Its attempt was counted in "left for the reaper"; the process ends without it.
        with contextlib.suppress(RuntimeError):
            self._event_loop.call_soon_threadsafe(callback, *args)

    def _drain_inbox(self) -> None:
        self._inbox_wakeup = False
        while self._inbox:
            self._finished(*self._inbox.popleft())

    async def _run(self, att: Attempt) -> None:
        context = self._context(att)
        try:
            outcome = await execute(att, self.worker_id, context, self._pool, self._on_stuck)
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
        return failure(att, self.worker_id, PermanentError(text), retryable=False)

    def _finished(self, att: Attempt, outcome: Outcome) -> None:
        att.done = True
        self.running -= 1
        self._poke()
        if failpoints.ACTIVE and outcome.kind != "skip":
            failpoints.hit("worker.after_handler")
        self.outbox.append((att, outcome))
        if len(self.outbox) >= dtq_settings.FINALIZE_BATCH or len(self.outbox) == 1:
            self._flush_now.set()  # type: ignore[union-attr]

    def _on_stuck(self, att: Attempt, future: Future[Any] | asyncio.Future[Any]) -> None:
        """Keep counting a timed-out sync handler's thread against capacity until it ends."""
        self.stuck.add(att)
        log.warning(
            "task_id=%s timed out after %ss; its thread keeps running (stuck=%s)",
            att.id,
            att.timeout,
            len(self.stuck),
        )
        future.add_done_callback(lambda _: self._call_on_loop(self._unstick, att))
        if len(self.stuck) >= self.concurrency:
            log.error("every slot is held by a stuck thread: exiting so a supervisor restarts us")
            self.exit_code = 3
            self.stop()

    def _unstick(self, att: Attempt) -> None:
        self.stuck.discard(att)
        self._poke()

    # ----- finalizing ------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        assert self._flush_now is not None
        pause = dtq_settings.FINALIZE_FLUSH_MS / 1000
        backoff = 0.05
        while True:
            await self._flush_now.wait()
            self._flush_now.clear()
            if pause and self._worth_waiting():
                await asyncio.sleep(pause)  # let concurrent handlers join this batch
            try:
                await self._flush()
                backoff = 0.05
            except RedisError as exc:
                self.refusals.report(exc, "finalizing", backoff)  # outcomes stay in the outbox
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                self._flush_now.set()

    def _worth_waiting(self) -> bool:
        """Wait for more outcomes only while other handlers run and the batch has room."""
        return self.running > 0 and len(self.outbox) < dtq_settings.FINALIZE_BATCH

    async def _flush(self) -> None:
        while self.outbox:
            batch = self.outbox[: dtq_settings.FINALIZE_BATCH]
            ran = [pair for pair in batch if pair[1].kind != "skip"]
            if len(ran) < len(batch):
                await self._skip([pair for pair in batch if pair[1].kind == "skip"])
            if ran:
                await self._finalize(ran)
            del self.outbox[: len(batch)]
            for att, _ in batch:
                self.held.pop(att.entry, None)
            self.processed += len(ran)
            if failpoints.ACTIVE:
                failpoints.hit("worker.after_finalize")
            if self.max_tasks and self.processed >= self.max_tasks:
                self.stop()
            self._poke()

    async def _skip(self, batch: list[tuple[Attempt, Outcome]]) -> None:
        """Record attempts dropped unrun and give back those still ours (skip.lua)."""
        done = await gateway.skip(self._flusher, self.keys, batch, self.worker_id)
        for (att, out), given_back in zip(batch, done, strict=True):
            log.warning(
                "task_id=%s attempt=%s: handler not started (%s): %s",
                att.id,
                att.attempt,
                out.data,
                "given back" if given_back else "no longer ours, only recorded",
            )

    def _report_finished(
        self, batch: list[tuple[Attempt, Outcome]], decided: list[gateway.Decided]
    ) -> None:
        """Tell finished hooks what finalize.lua decided, on the pool (receivers may use the ORM).

        Not awaited: the flush loop goes on finalizing; main() waits for them before it ends.
        """
        loop = asyncio.get_running_loop()
        for (att, out), decision in zip(batch, decided, strict=True):
            if has_finished_hook(att):
                future = loop.run_in_executor(
                    self._pool, report_finished, att, self.worker_id, out, decision.state
                )
                self._hooks.add(future)
                future.add_done_callback(self._hooks.discard)

    async def _finalize(self, batch: list[tuple[Attempt, Outcome]]) -> None:
        decided = await gateway.finalize(
            self._flusher, self.keys, batch, bool(dtq_settings.DLQ_ENABLED), self.worker_id
        )
        self._report_finished(batch, decided)
        for (att, _), decision in zip(batch, decided, strict=True):
            if not decision.applied:
                log.warning(
                    "task_id=%s attempt=%s: lease lost, outcome rejected by the fence",
                    att.id,
                    att.attempt,
                )
