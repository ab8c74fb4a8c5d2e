"""Test helpers: run queued tasks inside the test's own process, through the real engine.

    from dtq.testing import run_queued

    def test_signup(django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            signup("ada")                  # calls send_welcome.enqueue_on_commit(...)
        assert run_queued("emails")        # claims, runs and finalizes like a worker would

Tasks go through the same Lua scripts a worker uses (claim, finalize), so states, attempt
history, retries, idempotency records and django.tasks signals are those of production.
Sync tasks run on the calling thread, so they see the test's database transaction.
"""

from __future__ import annotations

import asyncio
import os
import queue as queues
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from dtq.engine import executor, read_side
from dtq.engine.executor import Attempt
from dtq.engine.keys import check_queue_name
from dtq.engine.scheduler import Scheduler
from dtq.engine.worker import Worker

__all__ = ["run_queued"]


def run_queued(queue: str | None = None, *, max_tasks: int | None = None) -> list[str]:
    """Run what is queued now on `queue` (default: every queue) and return the task ids run.

    Delayed tasks and retries that are due are promoted first; a retry scheduled for later
    stays RETRYING until run_queued is called again after its delay.
    """
    Scheduler().run_once()
    names = [check_queue_name(queue)] if queue else read_side.queue_names()
    if not names:
        return []
    return _InProcessWorker(names, max_tasks).run_here()


class _CallerThread(Executor):
    """An executor whose calls run on the thread that serves it: the test's thread."""

    def __init__(self) -> None:
        self._calls: queues.SimpleQueue[Any] = queues.SimpleQueue()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue fn for the serving thread and return its future."""
        future: Future[Any] = Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def serve(self) -> None:
        """Run submitted calls, in order, until close()."""
        while (item := self._calls.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(_call(fn, args, kwargs))
            except BaseException as exc:  # the worker's loop decides what a failure means
                future.set_exception(exc)

    def close(self) -> None:
        """Make serve() return once the calls before this one ran."""
        self._calls.put(None)


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # The test framework owns this thread's database connection and its transaction: run
    # handlers without the worker's connection recycling, which would close it (or, where
    # pytest-django blocks the database, fail the task for touching it).
    if fn is executor._run_sync:
        return _in_test(*args)
    if fn is executor.run_sync_attempt:  # the worker's fast path for plain sync handlers
        return fn(*args, run=_in_test)
    return fn(*args, **kwargs)


def _in_test(
    att: executor.Attempt, func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    executor._begin(att)  # the lease check stays: it raises StartRefused when it fails
    return func(*args, **kwargs)


class _InProcessWorker(Worker):
    """A burst worker whose event loop runs on a helper thread and whose pool is the caller."""

    def __init__(self, names: list[str], max_tasks: int | None) -> None:
        worker_id = f"testing.{os.getpid()}.{os.urandom(3).hex()}"
        self._caller_thread = _CallerThread()
        super().__init__(
            names,
            concurrency=1,
            burst=True,
            max_tasks=max_tasks,
            worker_id=worker_id,
            pool=self._caller_thread,
        )
        self.ran: list[str] = []
        self.error: BaseException | None = None

    def _install_signals(self) -> None:
        """Leave SIGTERM and SIGINT to the test process (the loop is not on the main thread)."""

    def _start(self, att: Attempt) -> None:
        self.ran.append(att.id)
        super()._start(att)

    def run_here(self) -> list[str]:
        """Run until the queues are empty; return the ids of the tasks claimed."""
        thread = threading.Thread(target=self._loop, name="dtq-testing", daemon=True)
        thread.start()
        self._caller_thread.serve()
        thread.join()
        if self.error is not None:
            raise self.error
        return self.ran

    def _loop(self) -> None:
        try:
            asyncio.run(self.main())
        except BaseException as exc:
            self.error = exc
        finally:
            self._caller_thread.close()
