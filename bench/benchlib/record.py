"""Handler-side recorder: one line per finished task, appended with a single write()."""

from __future__ import annotations

import os
import time

_fd: int | None = None
_key: int | None = None


def record(seq: int, enqueued_at: float, started_at: float, proc: int | None = None) -> None:
    """Append 'seq enqueued started finished' to $BENCH_OUT/<proc>.log (proc defaults to pid)."""
    global _fd, _key
    key = proc if proc is not None else os.getpid()
    if _fd is None or _key != key:
        path = os.path.join(os.environ["BENCH_OUT"], f"{key}.log")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _key = key
    line = f"{seq} {enqueued_at:.6f} {started_at:.6f} {time.time():.6f}\n"
    os.write(_fd, line.encode())
