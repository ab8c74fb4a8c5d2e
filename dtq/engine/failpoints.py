"""Named crash points for tests: DTQ_FAILPOINTS=name[,name@N] SIGKILLs the process there.

Call sites guard with ``if failpoints.ACTIVE:`` so an unset variable costs one attribute read.
"""

from __future__ import annotations

import os
import signal
import sys

NAMES = frozenset(
    {
        "worker.after_read",
        "worker.after_claim",
        "worker.after_handler",
        "worker.after_finalize",
        "scheduler.after_promote",
        "reaper.after_reclaim",
        "idempotency.after_fn",
    }
)


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition("@")
        if name not in NAMES:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(NAMES))}")
        points[name] = int(nth) if nth else 1
    return points


_targets = _parse(os.environ.get("DTQ_FAILPOINTS", ""))
_passes: dict[str, int] = {}
ACTIVE = bool(_targets)


def hit(name: str) -> None:
    """Count a pass through a failpoint; SIGKILL this process on the configured pass."""
    target = _targets.get(name)
    if target is None:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] == target:
        sys.stderr.write(f"dtq failpoint {name}@{target}: killing pid {os.getpid()}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
