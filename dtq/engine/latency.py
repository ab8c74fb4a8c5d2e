"""The worker's latency histograms: counted in the worker, added to Redis by its heartbeat.

A queue's histograms live in its stats hash, as the read side reads them (read_side.queues):
`h_<kind>_<i>` counts observations in bucket i (upper bounds protocol.LATENCY_BUCKETS_MS, i =
one past the last for larger ones) and `h_<kind>_sum` their total in ms. The worker counts
the wait (queued to claimed, both on Redis' clock) and run (claimed to the outcome) of its own
attempts, and the heartbeat adds the counts with one HINCRBY per field and beat, so a task
costs the hot scripts nothing for them. A worker that dies loses the counts of its last beat
(statistics, never tasks); limit_wait is still counted by the claim itself (lib.lua).
"""

from __future__ import annotations

import bisect

from dtq.engine.protocol import LATENCY_BUCKETS_MS

KINDS = ("wait", "run")
_FIELDS = {kind: [f"h_{kind}_{i}" for i in range(1, len(LATENCY_BUCKETS_MS) + 2)] for kind in KINDS}
_SUMS = {kind: f"h_{kind}_sum" for kind in KINDS}

Counts = dict[tuple[int, str], dict[str, int]]  # (shard, queue) -> stats field -> increment


class Latencies:
    """Owns the histogram counts observed and not yet added to Redis, by shard and queue."""

    def __init__(self) -> None:
        self._counts: Counts = {}

    def observe(self, shard: int, queue: str, kind: str, ms: float) -> None:
        """Count one observation of kind ('wait' or 'run') of ms milliseconds."""
        if ms < 0:
            return  # clocks of two hosts: a claim cannot come before its queueing
        fields = self._counts.get((shard, queue))
        if fields is None:
            fields = self._counts[(shard, queue)] = {}
        # Bucket i holds bounds[i-1] < ms <= bounds[i], as Prometheus' le buckets.
        bucket = _FIELDS[kind][bisect.bisect_left(LATENCY_BUCKETS_MS, ms)]
        fields[bucket] = fields.get(bucket, 0) + 1
        total = _SUMS[kind]
        fields[total] = fields.get(total, 0) + int(ms)

    def take(self) -> Counts:
        """Return the counts so far and start again from none."""
        counts, self._counts = self._counts, {}
        return counts

    def put_back(self, counts: Counts) -> None:
        """Add counts that could not be written back, to be written with the next ones."""
        for place, fields in counts.items():
            mine = self._counts.setdefault(place, {})
            for name, n in fields.items():
                mine[name] = mine.get(name, 0) + n
