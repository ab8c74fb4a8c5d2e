"""The worker's HandlerPool: plain calls on its own threads, submit as a ThreadPoolExecutor."""

from __future__ import annotations

import os
import sys
import threading
import time

from dtq.engine.executor import HandlerPool


def test_plain_calls_report_results_and_errors_on_pool_threads() -> None:
    pool = HandlerPool(max_workers=2)
    got: list[tuple[object, object, str]] = []
    done = threading.Semaphore(0)

    def report(result: object, exc: BaseException | None) -> None:
        got.append((result, type(exc).__name__ if exc else None, threading.current_thread().name))
        done.release()

    pool.run_plain(lambda a, b: a + b, (1, 2), report)
    pool.run_plain(lambda: 1 / 0, (), report)
    for _ in range(2):
        assert done.acquire(timeout=5)
    assert {g[:2] for g in got} == {(None, "ZeroDivisionError"), (3, None)}
    assert all(name.startswith("dtq-task") for _, _, name in got)
    assert pool.submit(lambda: 4).result(timeout=5) == 4  # hooks and timeouts: as ever
    pool.shutdown(wait=True)
    assert not any(t.name.startswith("dtq-task-p") for t in threading.enumerate())


def test_a_failing_report_is_logged_and_the_thread_serves_on(caplog) -> None:
    pool = HandlerPool(max_workers=1)
    done = threading.Event()

    def bad(result: object, exc: BaseException | None) -> None:
        raise RuntimeError("report failed")

    pool.run_plain(lambda: None, (), bad)
    pool.run_plain(lambda: None, (), lambda result, exc: done.set())
    assert done.wait(timeout=5)
    assert "could not be handed" in caplog.text
    pool.shutdown(wait=True)


def test_a_hard_stop_drops_plain_calls_not_started() -> None:
    pool = HandlerPool(max_workers=1)
    started, release, ran = threading.Event(), threading.Event(), []

    def first() -> None:
        started.set()
        release.wait(5)

    pool.run_plain(first, (), lambda result, exc: ran.append("first"))
    assert started.wait(timeout=5)
    pool.run_plain(lambda: None, (), lambda result, exc: ran.append("second"))
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    for thread in list(threading.enumerate()):
        if thread.name.startswith("dtq-task-p"):
            thread.join(timeout=5)
    assert ran == ["first"]


def _spin(seconds: float) -> None:
    """Run Python for a while without releasing the GIL (no blocking call)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _ran_during_spin(pool: HandlerPool, hand_over: bool) -> bool:
    """Put a plain call, keep the GIL (the woken thread then waits for it), optionally hand
    over, keep the GIL again: return whether the call ran before this thread blocked."""
    ran = threading.Event()
    pool.run_plain(ran.set, (), lambda result, exc: None)
    _spin(0.02)
    if hand_over:
        pool.hand_over()
    _spin(0.05)
    during = ran.is_set()
    assert ran.wait(timeout=5)  # blocking lets it run in any case: trials stay apart
    return during


def test_hand_over_lets_the_woken_thread_run_before_the_caller_blocks() -> None:
    # A switch interval longer than the test: without hand_over, the woken thread cannot
    # take the GIL from a thread that never blocks.
    interval, cpus = sys.getswitchinterval(), os.sched_getaffinity(0)
    # On one CPU the release always reaches the woken thread; across CPUs the caller can
    # take the GIL back before that thread is scheduled (a race the OS decides, which a CI
    # host lost five times running). The pool's threads inherit this thread's affinity.
    os.sched_setaffinity(0, {min(cpus)})
    pool = HandlerPool(max_workers=1)
    sys.setswitchinterval(10.0)
    try:
        assert not _ran_during_spin(pool, hand_over=False)
        assert any(_ran_during_spin(pool, hand_over=True) for _ in range(10))
    finally:
        sys.setswitchinterval(interval)
        pool.shutdown(wait=True)
        os.sched_setaffinity(0, cpus)
