"""Recognize Redis refusing writes (OOM, READONLY, MISCONF) and log each change of it once.

Redis refuses a write while it is over `maxmemory` with `noeviction` (OOM), while it is a
replica (READONLY, e.g. the old primary after a failover) and while its last background save
failed with `stop-writes-on-bgsave-error yes` (MISCONF). A script is refused at its first
write, before it changed anything (under OOM only if that write adds memory; once a script
has written, Redis lets it finish), so a refused call wrote nothing and can be sent again.
The refusal is a state of the server, not of one call: the roles keep retrying and say so
once when it starts and once when it ends, never once per task or per retry.
"""

from __future__ import annotations

import logging
import re
import time

from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

from dtq.engine.errors import WritesRefused

# redis-py maps OOM and READONLY replies to their own classes; a MISCONF reply, and on Redis
# 6.2 any error raised inside a script ("... @user_script: 1: -OOM command not allowed ..."),
# arrives as a plain ResponseError that carries the code in its text.
_CLASSES = ((OutOfMemoryError, "OOM"), (ReadOnlyError, "READONLY"))
_CODE = re.compile(r"\b(OOM|READONLY|MISCONF) ")


def reason(exc: BaseException) -> str | None:
    """Return OOM, READONLY or MISCONF when exc is Redis refusing a write, else None."""
    if not isinstance(exc, ResponseError):
        return None
    for cls, code in _CLASSES:
        if isinstance(exc, cls):
            return code
    match = _CODE.search(str(exc))
    return match.group(1) if match else None


def describe(exc: BaseException) -> str:
    """Return Redis' first sentence about a refusal, starting with its code ('OOM command ...')."""
    # A pipeline puts its own words first (the asyncio one also the repr of the reply's args).
    text = str(exc).rpartition("caused error: ")[2].strip("()\"', ")
    match = _CODE.search(text)
    text = text[match.start(1) :] if match else f"{reason(exc)} {text}"
    return text.split(". ", 1)[0].rstrip(".") + "."


def as_submit_error(exc: BaseException) -> WritesRefused | None:
    """Return the WritesRefused that exc means for a submission, or None if it is no refusal."""
    code = reason(exc)
    return None if code is None else WritesRefused(code, describe(exc))


class WriteRefusals:
    """One role's view of whether Redis accepts its writes; logs only the changes."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.reason: str | None = None  # the refusal in force; None while writes go through
        self.since = 0.0
        self.resumed_at: float | None = None  # monotonic time the last refusal ended

    def refused(self, exc: BaseException) -> bool:
        """Note exc if it is a refused write, logging a new or changed refusal; return whether."""
        code = reason(exc)
        if code is None:
            return False
        if code != self.reason:
            self.log.warning("redis refuses writes (%s): retrying", describe(exc))
            if self.reason is None:
                self.since = time.monotonic()
            self.reason = code
        return True

    def report(self, exc: Exception, doing: str, delay: float) -> None:
        """Log a Redis error before a retry: a refusal once per change, anything else each time."""
        if not self.refused(exc):
            self.log.warning("redis error while %s, retrying in %.2fs: %s", doing, delay, exc)

    def accepted(self) -> None:
        """Note that a write went through; log it once if writes were refused until now."""
        if self.reason is None:
            return
        now = time.monotonic()
        self.log.warning(
            "redis accepts writes again (refused %s for %.1fs)", self.reason, now - self.since
        )
        self.reason = None
        self.resumed_at = now

    def recent(self, seconds: float) -> bool:
        """Return True while writes are refused, and for `seconds` after they are accepted again."""
        if self.reason is not None:
            return True
        return self.resumed_at is not None and time.monotonic() - self.resumed_at < seconds
