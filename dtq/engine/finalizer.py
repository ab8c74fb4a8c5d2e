"""The worker's finalizer: records outcomes in batches with finalize.lua and skip.lua."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import failpoints, gateway, workflows
from dtq.engine.direct import AsyncCaller
from dtq.engine.executor import Attempt, Outcome, has_finished_hook, report_finished
from dtq.engine.keys import Keys
from dtq.engine.latency import Latencies
from dtq.engine.refusals import WriteRefusals
from dtq.engine.runner import Runner

log = logging.getLogger("dtq.worker")
MAX_BACKOFF = 5.0  # seconds between retries of a loop while Redis is down or refuses writes


class Finalizer:
    """Owns the outbox of outcomes not yet recorded and the finished hooks still running."""

    def __init__(
        self,
        client: Any,
        keys: Keys,
        worker_id: str,
        runner: Runner,
        on_flushed: Callable[[], None],
        refusals: WriteRefusals,
        latencies: Latencies,
    ) -> None:
        self._keys = keys
        self._worker_id = worker_id
        self._runner = runner  # releases each attempt once its outcome is recorded
        self._on_flushed = on_flushed  # after each batch: the worker may stop or read again
        self._refusals = refusals
        self._latencies = latencies  # where a recorded attempt's run time is counted
        self._caller = AsyncCaller(client)
        self.outbox: list[tuple[Attempt, Outcome]] = []
        self._ran_ms: dict[str, float] = {}  # entry -> how long its handler ran (ms)
        self.processed = 0
        self._flush_now = asyncio.Event()
        self._added = asyncio.Event()  # an outcome joined the outbox
        self._hooks: set[asyncio.Future[None]] = set()  # finished hooks still running

    def add(self, att: Attempt, outcome: Outcome) -> None:
        """Queue an outcome; flush at once when it starts a batch or fills one."""
        self.outbox.append((att, outcome))
        if outcome.kind != "skip":
            self._ran_ms[att.entry] = (time.time() - att.started_at) * 1000
        self._added.set()
        if len(self.outbox) >= dtq_settings.FINALIZE_BATCH or len(self.outbox) == 1:
            self._flush_now.set()

    def flush_soon(self) -> None:
        """Have the flush loop record the outbox now."""
        self._flush_now.set()

    async def loop(self) -> None:
        """Flush when told to until cancelled; Redis errors keep the outcomes for the next try."""
        pause = dtq_settings.FINALIZE_FLUSH_MS / 1000
        backoff = 0.05
        while True:
            await self._flush_now.wait()
            self._flush_now.clear()
            if pause:
                await self._gather(pause)
            try:
                await self.flush()
                backoff = 0.05
            except RedisError as exc:
                self._refusals.report(exc, "finalizing", backoff)  # outcomes stay in the outbox
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                self._flush_now.set()

    async def flush(self) -> None:
        """Record every outcome in the outbox, a batch per call."""
        while self.outbox:
            batch = self.outbox[: dtq_settings.FINALIZE_BATCH]
            ran = [pair for pair in batch if pair[1].kind != "skip"]
            if len(ran) < len(batch):
                await self._skip([pair for pair in batch if pair[1].kind == "skip"])
            if ran:
                await self._finalize(ran)
            del self.outbox[: len(batch)]
            for att, _ in batch:
                self._runner.release(att)
                self._ran_ms.pop(att.entry, None)
            self.processed += len(ran)
            if failpoints.ACTIVE:
                failpoints.hit("worker.after_finalize")
            self._on_flushed()

    async def wait_for_hooks(self, timeout: float) -> None:
        """Wait up to timeout for finished hooks still running."""
        if self._hooks:
            await asyncio.wait(set(self._hooks), timeout=timeout)

    async def aclose(self) -> None:
        """Give back the finalizer's script connection."""
        await self._caller.aclose()

    async def _gather(self, pause: float) -> None:
        """Let the outcomes of handlers still running join this batch, for up to pause seconds.

        Ends as soon as none is running or the batch is full: a fixed wait would hold every
        batch (and the slots its attempts keep) back the whole pause.
        """
        deadline = time.monotonic() + pause
        while self._worth_waiting():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._added.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._added.wait(), left)

    def _worth_waiting(self) -> bool:
        """Wait for more outcomes only while other handlers run and the batch has room."""
        return self._runner.running > 0 and len(self.outbox) < dtq_settings.FINALIZE_BATCH

    async def _skip(self, batch: list[tuple[Attempt, Outcome]]) -> None:
        """Record attempts dropped unrun and give back those still ours (skip.lua)."""
        done = await gateway.skip(self._caller, self._keys, batch, self._worker_id)
        for (att, out), given_back in zip(batch, done, strict=True):
            log.warning(
                "task_id=%s attempt=%s: handler not started (%s): %s",
                att.id,
                att.attempt,
                out.data,
                "given back" if given_back else "no longer ours, only recorded",
            )

    async def _finalize(self, batch: list[tuple[Attempt, Outcome]]) -> None:
        decided = await gateway.finalize(
            self._caller, self._keys, batch, bool(dtq_settings.DLQ_ENABLED), self._worker_id
        )
        self._report_finished(batch, decided)
        for (att, _), decision in zip(batch, decided, strict=True):
            ran = self._ran_ms.get(att.entry)
            if ran is not None and decision.applied:
                self._latencies.observe(self._keys.shard, att.queue, "run", ran)
        wf_ids = list(dict.fromkeys(att.workflow for att, _ in batch if att.workflow))
        if wf_ids:
            # finalize counted the members; submit what became ready (the reaper does it for
            # a workflow left due if this process dies first).
            if failpoints.ACTIVE:
                failpoints.hit("worker.before_workflow_advance")
            await asyncio.to_thread(workflows.advance_all, wf_ids)
        for (att, _), decision in zip(batch, decided, strict=True):
            if not decision.applied:
                log.warning(
                    "task_id=%s attempt=%s: lease lost, outcome rejected by the fence",
                    att.id,
                    att.attempt,
                )

    def _report_finished(
        self, batch: list[tuple[Attempt, Outcome]], decided: list[gateway.Decided]
    ) -> None:
        """Tell finished hooks what finalize.lua decided, on the pool (receivers may use the ORM).

        Not awaited: the flush loop goes on finalizing; the worker waits for them before it ends.
        """
        for (att, out), decision in zip(batch, decided, strict=True):
            if has_finished_hook(att):
                future = self._runner.in_pool(
                    report_finished, att, self._worker_id, out, decision.state
                )
                self._hooks.add(future)
                future.add_done_callback(self._hooks.discard)
