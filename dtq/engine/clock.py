"""The clock a worker ages its leases with: CLOCK_BOOTTIME where the system has one.

A lease runs on Redis' clock, which keeps going while this machine is stopped. Linux's
CLOCK_MONOTONIC stops while the system is suspended (a laptop lid, a VM suspended to disk and
resumed); CLOCK_BOOTTIME counts that time too, so an attempt claimed before a suspend is seen
as expired after it. Both ignore wall-clock steps (NTP, date). A hypervisor pause that hides
the time from the guest altogether fools every clock of the guest: there only a renewal that
reports the lease lost (or the finalize fence) can tell.
"""

from __future__ import annotations

import time

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)  # Linux only; monotonic elsewhere


def now() -> float:
    """Return seconds on the lease clock (only differences mean anything)."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()
