"""Parent-side reader of the per-process task logs written by benchlib.record."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field


@dataclass
class Rec:
    """One finished task as recorded by its handler."""

    seq: int
    enqueued: float
    started: float
    finished: float
    proc: str


@dataclass
class Records:
    """Incrementally tails every *.log file in one output directory."""

    out_dir: str
    by_seq: dict[int, Rec] = field(default_factory=dict)
    duplicates: int = 0
    _offsets: dict[str, int] = field(default_factory=dict)
    _partial: dict[str, bytes] = field(default_factory=dict)

    def poll(self) -> None:
        """Read whatever was appended since the last poll."""
        for name in os.listdir(self.out_dir):
            if not name.endswith(".log"):
                continue
            path = os.path.join(self.out_dir, name)
            with open(path, "rb") as fh:
                fh.seek(self._offsets.get(name, 0))
                data = self._partial.get(name, b"") + fh.read()
                self._offsets[name] = fh.tell()
            *lines, rest = data.split(b"\n")
            self._partial[name] = rest
            for line in lines:
                seq, enq, start, end = line.split()
                rec = Rec(int(seq), float(enq), float(start), float(end), name[:-4])
                if rec.seq in self.by_seq:
                    self.duplicates += 1
                else:
                    self.by_seq[rec.seq] = rec

    def count(self, seqs: range) -> int:
        """How many distinct tasks of `seqs` have finished."""
        return sum(1 for s in seqs if s in self.by_seq)

    def wait(self, seqs: range, timeout: float, interval: float = 0.02) -> bool:
        """Poll until every task of `seqs` finished or `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if self.count(seqs) >= len(seqs):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    def select(self, seqs: range) -> list[Rec]:
        """Finished records of `seqs`."""
        return [self.by_seq[s] for s in seqs if s in self.by_seq]


def drain_rate(recs: list[Rec]) -> float | None:
    """Steady-state tasks/s: from the moment every busy process has started to the last finish."""
    if len(recs) < 2:
        return None
    first: dict[str, float] = {}
    counts: dict[str, int] = {}
    for r in recs:
        first[r.proc] = min(first.get(r.proc, r.started), r.started)
        counts[r.proc] = counts.get(r.proc, 0) + 1
    busy = [p for p, c in counts.items() if c >= max(2, len(recs) // 100)]
    t_ready = max(first[p] for p in busy) if busy else min(first.values())
    last = max(r.finished for r in recs)
    in_window = [r for r in recs if r.started >= t_ready]
    if len(in_window) < len(recs) // 2 or last <= t_ready:
        t_ready = min(r.started for r in recs)
        in_window = recs
    return len(in_window) / (last - t_ready) if last > t_ready else None


def latency_ms(recs: list[Rec]) -> tuple[float | None, float | None]:
    """p50 and p99 of (handler start - enqueue) in milliseconds."""
    lat = sorted((r.started - r.enqueued) * 1000.0 for r in recs)
    if not lat:
        return None, None
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    return statistics.median(lat), p99
