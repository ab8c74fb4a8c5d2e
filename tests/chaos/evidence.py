"""The files a run leaves behind, and the append-only JSON-lines log the driver writes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

CONFIG = "config.json"
EVENTS = "events.jsonl"  # processes, faults, phases: everything the driver did or saw
SUBMISSIONS = "submissions.jsonl"
CANCELS = "cancels.jsonl"
SNAPSHOT = "snapshot.json"  # Redis state after the drain
WITNESS = "witness"  # directory of <pid>.jsonl files written by the handlers
LOGS = "logs"  # stderr of every process the run started
FREEZES = "failpoints.jsonl"  # freezes the processes' failpoints caused (DTQ_FAILPOINTS_LOG)


class JsonLog:
    """A thread-safe JSON-lines file; every row gets a wall-clock timestamp 't'."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = path.open("a", buffering=1)

    def write(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one row and return it."""
        row = {"t": fields.pop("t", None) or time.time(), "kind": kind, **fields}
        with self._lock:
            self._fh.write(json.dumps(row, separators=(",", ":")) + "\n")
        return row

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._fh.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Return the rows of a JSON-lines file; a torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def read_witness(run_dir: Path) -> list[dict[str, Any]]:
    """Return every witness row of every process, oldest first."""
    rows = [row for f in sorted((run_dir / WITNESS).glob("*.jsonl")) for row in read_jsonl(f)]
    return sorted(rows, key=lambda r: r["t"])
