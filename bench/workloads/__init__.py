"""Worker-side task definitions: one module per system, identical handler bodies."""

from __future__ import annotations

import asyncio
import os
import time

from benchlib.record import record

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0")
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "8"))
IO_SECONDS = 0.001


def handle(seq: int, enqueued_at: float, kind: str, proc: int | None = None) -> None:
    """The sync handler body: note the start, sleep 1 ms for kind 'io', record."""
    started = time.time()
    if kind == "io":
        time.sleep(IO_SECONDS)
    record(seq, enqueued_at, started, proc)


async def ahandle(seq: int, enqueued_at: float, kind: str) -> None:
    """The async handler body: note the start, asyncio.sleep 1 ms for kind 'io', record."""
    started = time.time()
    if kind == "io":
        await asyncio.sleep(IO_SECONDS)
    record(seq, enqueued_at, started)
