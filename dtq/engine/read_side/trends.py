"""Read side: per-queue trends for the dashboard: throughput per minute and latency quantiles."""

from __future__ import annotations

from typing import Any

from dtq.engine.protocol import counted_as
from dtq.engine.read_side.queues import THROUGHPUT_COUNTERS, Histogram, Minutes, read_minutes


def quantile(hist: Histogram, q: float) -> float | None:
    """Return the q-quantile (0..1) of a cumulative histogram in seconds, or None when empty.

    Interpolated linearly inside the bucket that holds it, as Prometheus' histogram_quantile
    does; an observation past the last finite bound reads as that bound.
    """
    count = hist["count"] or (hist["buckets"][-1][1] if hist["buckets"] else 0)
    if not count:
        return None
    rank = q * count
    lower, below = 0.0, 0
    for bound, total in hist["buckets"]:
        if total >= rank:
            if bound == float("inf"):
                return lower
            inside = total - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, total
    return lower


def percentiles(latency: dict[str, Histogram]) -> dict[str, dict[str, Any]]:
    """Return the median, 95th percentile (seconds) and count of a queue's wait and run times."""
    return {
        kind: {"p50": quantile(h, 0.5), "p95": quantile(h, 0.95), "count": h["count"]}
        for kind, h in latency.items()
    }


def throughput_per_queue(
    queues: list[str], minutes: int = 60, read: Minutes | None = None
) -> dict[str, list[dict[str, int]]]:
    """Return per-minute counters, oldest minute first, for each of the queues.

    The buckets are shared by every queue (read_minutes: minutes x SHARDS commands whatever
    the number of queues); `read`: buckets already read (then no command is sent).
    """
    wanted = set(queues)
    rows: dict[str, list[dict[str, Any]]] = {q: [] for q in queues}
    for minute, buckets in read_minutes(minutes) if read is None else read:
        for queue in queues:
            rows[queue].append({"minute": minute * 60} | dict.fromkeys(THROUGHPUT_COUNTERS, 0))
        for bucket in buckets:  # one per shard: the counts add up
            for name, value in bucket.items():
                owner, _, counter = name.rpartition(":")
                if owner not in wanted:
                    continue
                for name in counted_as(counter):
                    if name in THROUGHPUT_COUNTERS:
                        rows[owner][-1][name] += int(value)
    return rows
