"""The worker: a reader and a finalizer per shard, a runner and a heartbeat, on one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import Executor
from typing import Any, TypeVar

from redis.exceptions import RedisError

from dtq.conf import dtq_settings
from dtq.engine import codec, failpoints, gateway, ids, shards
from dtq.engine.executor import Attempt, HandlerPool, Outcome, skipped
from dtq.engine.finalizer import MAX_BACKOFF, Finalizer
from dtq.engine.heartbeat import Heartbeat
from dtq.engine.latency import Latencies
from dtq.engine.reader import Reader
from dtq.engine.refusals import WriteRefusals
from dtq.engine.runner import Runner

log = logging.getLogger("dtq.worker")
T = TypeVar("T")


def claim_ahead(concurrency: int, trip: float, run_time: float) -> int:
    """Return how many attempts a busy worker claims beyond its free slots: those it expects
    to start within one read's round trip (`trip` s; handlers take `run_time` s), so over a
    network its slots do not wait on the read. None for handlers slower than the trip; at
    most PREFETCH_LIMIT.

    An attempt claimed ahead holds its lease from the claim: were the worker killed, it
    would count as an attempt (reclaimed, 'worker lost') although its handler never ran;
    these are the attempts it would have started within a round trip.
    """
    if run_time <= 0 or trip <= 0:
        return 0
    return min(dtq_settings.PREFETCH_LIMIT, int(concurrency * trip / run_time))


class Worker:
    """Runs tasks from a set of queues until stopped; one asyncio loop per process.

    The parts each own their state: each shard's reader its read connections and stream map,
    the runner the held attempts and the pool (capacity is shared by every shard), each
    shard's finalizer its outbox, the heartbeat the lease renewals and the registration. The
    worker owns the fetch loop and the stop.
    """

    def __init__(
        self,
        queues: list[str],
        *,
        concurrency: int = 16,
        worker_id: str | None = None,
        burst: bool = False,
        max_tasks: int | None = None,
        shutdown_timeout: float = 30.0,
        pool: Executor | None = None,
    ) -> None:
        self.queues = list(dict.fromkeys(queues))
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}.{os.getpid()}.{os.urandom(3).hex()}"
        self.burst = burst
        self.max_tasks = max_tasks
        self.shutdown_timeout = shutdown_timeout
        self.refusals = WriteRefusals(log)  # shared by the loops: one log line per change
        self.stopping = False
        self.exit_code = 0
        self.abandoned = 0  # attempts and stuck threads still held when the loop stopped
        self._changed = asyncio.Event()  # a slot freed or a stop: the fetch loop looks again
        # One client per shard (on a cluster each reaches its shard's primary); each connects
        # on first use, on the loop that runs.
        self._clients = {shard: shards.new_async_client(shard) for shard in shards.numbers()}
        pool = pool or HandlerPool(max_workers=concurrency, thread_name_prefix="dtq-task")
        self.readers = [
            Reader(client, shards.keys(shard), self.queues, self.worker_id)
            for shard, client in self._clients.items()
        ]
        self._first_reader = 0  # the shard a batch read starts at, in turn: none starves
        # The streams a blocking read's take left with nothing more to read: the next read
        # blocks on them at once (see _fetch_once).
        self._watching: list[tuple[Reader, list[str]]] = []
        self.latencies = Latencies()  # counted here and by the finalizers, written by the heartbeat
        self.runner = Runner(
            self.worker_id,
            concurrency,
            pool,
            on_outcome=self._outcome,
            on_change=self._poke,
            on_all_stuck=self._all_stuck,
        )
        self.finalizers = {
            shard: Finalizer(
                client,
                shards.keys(shard),
                self.worker_id,
                self.runner,
                self._flushed,
                self.refusals,
                self.latencies,
            )
            for shard, client in self._clients.items()
        }
        self.heartbeat = Heartbeat(
            self._clients,
            self.queues,
            self.worker_id,
            self.runner,
            self._describe,
            self.refusals,
            self.latencies,
        )

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
        """Start the flush and heartbeat loops, fetch until stopped, then drain."""
        self._install_signals()
        log.info(
            "worker started worker_id=%s queues=%s concurrency=%s",
            self.worker_id,
            ",".join(self.queues),
            self.concurrency,
        )
        loops = [
            asyncio.create_task(self.heartbeat.loop()),
            *(asyncio.create_task(f.loop()) for f in self.finalizers.values()),
        ]
        try:
            await self._fetch_loop()
            await self._drain()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            for finalizer in self.finalizers.values():
                await finalizer.wait_for_hooks(self.shutdown_timeout)
            await self.heartbeat.deregister()
            for reader in self.readers:
                await reader.aclose()
            for finalizer in self.finalizers.values():
                await finalizer.aclose()
            await self.heartbeat.aclose()
            for client in self._clients.values():
                await client.aclose()
            self.runner.shutdown()
            self.abandoned = len(self.runner.held) + len(self.runner.stuck)
            log.info("worker stopped worker_id=%s processed=%s", self.worker_id, self.processed)

    @property
    def processed(self) -> int:
        """How many attempts' outcomes this worker recorded (every shard)."""
        return sum(f.processed for f in self.finalizers.values())

    def _outbox_empty(self) -> bool:
        return not any(f.outbox for f in self.finalizers.values())

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
        """Stop taking new tasks; running ones finish and are finalized, and those claimed
        ahead of a slot are given back (skip.lua) for other workers to start now."""
        self.stopping = True
        for reader in self.readers:
            reader.stop()
        for att in self.runner.give_back_waiting():
            self._outcome(att, skipped(att, self.worker_id, "worker_stopping"))
        self._poke()

    def _poke(self) -> None:
        self._changed.set()

    def _all_stuck(self) -> None:
        """Every slot is held by a stuck thread: exit so a supervisor restarts us."""
        self.exit_code = 3
        self.stop()

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while (self.runner.held or not self._outbox_empty()) and time.monotonic() < deadline:
            for finalizer in self.finalizers.values():
                finalizer.flush_soon()
            await asyncio.sleep(0.01)
        for finalizer in self.finalizers.values():
            await finalizer.flush()
        if self.runner.held:
            log.warning("shutdown timeout: %s task(s) left for the reaper", len(self.runner.held))

    # ----- fetching --------------------------------------------------------------------

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
        capacity = self._capacity()
        if capacity <= 0:
            if self.max_tasks and self.runner.claimed >= self.max_tasks and not self.runner.waiting:
                self.stop()  # the drain finalizes what was claimed
                return
            self._changed.clear()
            await self._changed.wait()
            return
        if self.runner.running and capacity < self._batch():
            await self._gather_slots()
            capacity = self._capacity()
        backlog = [r for r in self.readers if r.unclaimed and not r.resting()]
        if backlog:
            for reader in backlog:
                if (capacity := self._capacity()) > 0:
                    self._start_all(
                        await self._on_shard(reader, reader.claim_unclaimed(capacity)) or []
                    )
            return
        # After a blocking read whose take read everything new, the next read blocks again
        # at once instead of taking first: a blocking read returns at once what came since,
        # with the take behind it, so the take alone would cost Redis a call (~185 kIr, at
        # an idle worker a sixth of a task's) and find nothing more.
        watches, self._watching = self._watching, []
        if not watches:
            read_any, watches = await self._read_every_shard()
            if read_any:
                return
        if watches and not self.burst:
            await self._wait_for_new(watches)
        elif self.burst and not self.runner.held and self._outbox_empty():
            self.stop()
        else:
            # Burst mode with tasks still running, every queue paused, or every shard resting
            # after an error: wait for a slot to free, a stop, or the timeout.
            await self._sleep_or_poke(dtq_settings.BLOCK_TIMEOUT)

    async def _gather_slots(self) -> None:
        """Let slots about to free join the next read: wait up to half a take's round trip.

        A take sent for one free slot holds the next one back a whole round trip, while the
        other slots free; waiting a fraction of it for them costs less (over a network the
        batches then stay full), and at most FINALIZE_FLUSH_MS.
        """
        trip = min(r.round_trip for r in self.readers)
        wait = min(dtq_settings.FINALIZE_FLUSH_MS / 1000, trip / 2)
        deadline = time.monotonic() + wait
        while self.runner.running and self._capacity() < self._batch() and not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def _ahead(self) -> int:
        """How many attempts to claim beyond the free slots now (claim_ahead; busy only)."""
        if not self.runner.running or self.stopping:
            return 0
        trip = min(r.round_trip for r in self.readers)
        return claim_ahead(self.concurrency, trip, self.runner.run_time)

    def _batch(self) -> int:
        """The capacity worth a read of its own: every slot, or with attempts claimed ahead,
        half of all a worker may hold (one read in flight covers what the others run)."""
        return max(self.concurrency, (self.concurrency + self._ahead()) // 2)

    def _capacity(self) -> int:
        """How many more attempts to claim now (free slots and those to claim ahead, within
        what --max-tasks leaves)."""
        capacity = self.runner.claimable(self._ahead())
        if self.max_tasks:
            capacity = min(capacity, self.max_tasks - self.runner.claimed)
        return capacity

    async def _on_shard(self, reader: Reader, work: Awaitable[T]) -> T | None:
        """Await one shard's read or claim; None when it failed and other shards go on.

        With one shard an error goes to the fetch loop's backoff, as always. With several, the
        failing shard alone rests for a backoff (a cluster primary failing over must not stop
        the others).
        """
        try:
            result = await work
        except RedisError as exc:
            if len(self.readers) == 1:
                raise
            self.refusals.report(exc, f"reading shard {reader.shard}", reader.rest())
            return None
        reader.recovered()
        return result

    async def _read_every_shard(self) -> tuple[bool, list[tuple[Reader, list[str]]]]:
        """Take (read and claim) shard by shard while capacity lasts, from the next shard in turn.

        Return whether anything was read, and each shard's streams to watch when nothing was.
        """
        readers = self.readers[self._first_reader :] + self.readers[: self._first_reader]
        self._first_reader = (self._first_reader + 1) % len(self.readers)
        read_any = False
        watches = []
        for reader in readers:
            capacity = self._capacity()
            if capacity <= 0:
                break
            if (
                reader.resting()
                or (taken := await self._on_shard(reader, reader.take(capacity))) is None
            ):
                continue
            if taken.read:
                read_any = True
                self._start_all(taken.attempts)
            elif taken.watch:
                watches.append((reader, taken.watch))
        return read_any, watches

    async def _wait_for_new(self, watches: list[tuple[Reader, list[str]]]) -> None:
        """Block on every watched shard at once; start or keep what arrives.

        One watched shard: the read and the claim of what it brings go in one round trip
        (Reader.wait_and_take). Several: one blocking connection per shard, the first read to
        return wakes the others, which return what Redis already handed them (entries in our
        pending list, never dropped), kept to be claimed next.
        """
        capacity = self._capacity()
        if len(watches) == 1:
            reader, watch = watches[0]
            taken = await self._on_shard(reader, reader.wait_and_take(watch, capacity))
            if failpoints.ACTIVE and taken and (taken.attempts or taken.left):
                failpoints.hit("worker.after_read")
            self._start_all(taken.attempts if taken else [])
            if taken and taken.watch and not taken.left:
                self._watching = [(reader, taken.watch)]
            return
        arrived = await self._wait_on_all(watches, capacity)
        if failpoints.ACTIVE and any(arrived.values()):
            failpoints.hit("worker.after_read")
        for reader, entries in arrived.items():
            reader.keep(entries or [])

    async def _wait_on_all(
        self, watches: list[tuple[Reader, list[str]]], capacity: int
    ) -> dict[Reader, list[gateway.Entry] | None]:
        """Block on several shards; the first to return wakes the rest. None: that one failed."""
        waits = {
            reader: asyncio.create_task(
                self._on_shard(reader, reader.wait_for_new(watch, capacity))
            )
            for reader, watch in watches
        }
        await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        for reader in waits:
            reader.wake()
        await asyncio.wait(waits.values())
        return {reader: task.result() for reader, task in waits.items()}

    async def _sleep_or_poke(self, timeout: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def _start_all(self, attempts: list[Attempt]) -> None:
        if failpoints.ACTIVE and attempts:
            failpoints.hit("worker.after_claim")  # before any handler can start on the pool
        one_shard = len(self.readers) == 1
        for att in attempts:
            if att.queued_ms:
                shard = self.readers[0].shard if one_shard else ids.shard_of(att.id)
                self.latencies.observe(shard, att.queue, "wait", att.claimed_ms - att.queued_ms)
            self._start(att)
        self.runner.let_run()

    def _start(self, att: Attempt) -> None:
        self.runner.start(att)

    # ----- what the parts report -------------------------------------------------------

    def _outcome(self, att: Attempt, outcome: Outcome) -> None:
        """Hand an outcome to the finalizer of its task's shard."""
        finalizers = self.finalizers
        finalizer = finalizers[ids.shard_of(att.id)] if len(finalizers) > 1 else finalizers[0]
        finalizer.add(att, outcome)

    def _flushed(self) -> None:
        """After each finalized batch: stop at --max-tasks, else let the fetch loop look again."""
        if self.max_tasks and self.processed >= self.max_tasks:
            self.stop()
        self._poke()

    def _describe(self, now: float) -> dict[str, Any]:
        """Return what the read side shows about this worker."""
        return {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": codec.dumps(self.queues),
            "concurrency": self.concurrency,
            "in_flight": len(self.runner.held),
            "stuck": len(self.runner.stuck),
            "processed": self.processed,
            "heartbeat": now,
            "state": "draining" if self.stopping else "running",
        }
