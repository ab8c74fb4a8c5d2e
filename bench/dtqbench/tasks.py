"""The dtq benchmark task (found by dtq's tasks.py autodiscovery)."""

from __future__ import annotations

from workloads import handle

import dtq


@dtq.task(queue_name="bench")
def noop(seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark task: sync handler, same body as every peer's."""
    handle(seq, enqueued_at, kind)
