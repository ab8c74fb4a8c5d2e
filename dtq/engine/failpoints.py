"""Named fault points for tests: DTQ_FAILPOINTS=name[@N][:freeze=S],... acts on the N-th pass.

By default the process SIGKILLs itself there. With ``:freeze=S`` it stops itself instead
(SIGSTOP, every thread at once, as a VM pause or a host overload does) and a helper process
resumes it after S seconds; each freeze is appended as a JSON line to $DTQ_FAILPOINTS_LOG when
that is set, so a test can tell which pauses it caused.

Call sites guard with ``if failpoints.ACTIVE:`` so an unset variable costs one attribute read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

NAMES = frozenset(
    {
        "worker.after_read",
        "worker.after_claim",
        "worker.before_handler",
        "worker.after_handler",
        "worker.after_finalize",
        "worker.before_workflow_advance",
        "scheduler.after_promote",
        "reaper.after_reclaim",
        "idempotency.after_fn",
    }
)
LOG_ENV = "DTQ_FAILPOINTS_LOG"


def _parse(spec: str) -> dict[str, tuple[int, float]]:
    """Return {name: (pass, freeze seconds or 0 for a kill)}."""
    points: dict[str, tuple[int, float]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, mode = item.partition(":")
        name, _, nth = point.partition("@")
        if name not in NAMES:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(NAMES))}")
        freeze = 0.0
        if mode:
            kind, _, seconds = mode.partition("=")
            if kind != "freeze" or not seconds:
                raise ValueError(f"failpoint {item!r}: the only mode is ':freeze=SECONDS'")
            freeze = float(seconds)
        points[name] = (int(nth) if nth else 1, freeze)
    return points


_targets = _parse(os.environ.get("DTQ_FAILPOINTS", ""))
_passes: dict[str, int] = {}
ACTIVE = bool(_targets)


def hit(name: str) -> None:
    """Count a pass through a failpoint; SIGKILL (or freeze) this process on its pass."""
    target = _targets.get(name)
    if target is None:
        return
    _passes[name] = _passes.get(name, 0) + 1
    nth, freeze = target
    if _passes[name] != nth:
        return
    if freeze:
        _freeze(f"{name}@{nth}", freeze)
        return
    sys.stderr.write(f"dtq failpoint {name}@{nth}: killing pid {os.getpid()}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _freeze(point: str, seconds: float) -> None:
    """Stop the whole process for `seconds`: a helper sends SIGCONT, then we SIGSTOP."""
    pid = os.getpid()
    sys.stderr.write(f"dtq failpoint {point}: freezing pid {pid} for {seconds}s\n")
    sys.stderr.flush()
    log = os.environ.get(LOG_ENV)
    if log:
        row = {"t": time.time(), "pid": pid, "point": point, "seconds": seconds}
        with open(log, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    helper = subprocess.Popen(["/bin/sh", "-c", f"sleep {seconds}; kill -CONT {pid}"])
    os.kill(pid, signal.SIGSTOP)
    # The stop may take effect a moment after kill() returns: this thread waits for the
    # helper, so it cannot run on before the freeze (the other threads are stopped by then).
    helper.wait()
