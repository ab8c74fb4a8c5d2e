"""When a schedule fires: cron expressions (cronsim) and fixed intervals, as epoch ms slots."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from dtq.engine.errors import InvalidTaskError


@dataclass(frozen=True, slots=True)
class Timing:
    """A cron expression in a time zone, or a fixed interval aligned on the Unix epoch.

    Cron has 5 fields, or 6 with seconds first. Slots are epoch milliseconds, so every
    scheduler computes the same slots from the same definition, whatever its host's zone.
    """

    cron: str | None = None
    every_ms: int | None = None
    timezone: str = "UTC"

    @classmethod
    def of(cls, cron: str | None, every: timedelta | None, timezone: str | None) -> Timing:
        """Return the Timing of a definition, or raise InvalidTaskError saying what is wrong."""
        if (cron is None) == (every is None):
            raise InvalidTaskError("a schedule needs exactly one of cron= or every=")
        zone = timezone or "UTC"
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidTaskError(f"unknown time zone {zone!r}") from None
        if every is not None:
            every_ms = int(every.total_seconds() * 1000)
            if every_ms < 1000:
                raise InvalidTaskError(f"every= must be at least one second, got {every}")
            return cls(every_ms=every_ms, timezone=zone)
        try:
            CronSim(str(cron), datetime.now(UTC))
        except CronSimError as exc:
            raise InvalidTaskError(f"invalid cron expression {cron!r}: {exc}") from None
        return cls(cron=str(cron), timezone=zone)

    def describe(self) -> str:
        """Return the definition as a person reads it."""
        if self.every_ms is not None:
            return f"every {timedelta(milliseconds=self.every_ms)}"
        return f"cron {self.cron} ({self.timezone})"

    def next_after(self, after_ms: int) -> int:
        """Return the first slot strictly after after_ms."""
        if self.every_ms is not None:
            return (after_ms // self.every_ms + 1) * self.every_ms
        return int(next(CronSim(str(self.cron), self._local(after_ms))).timestamp() * 1000)

    def last_before(self, before_ms: int) -> int | None:
        """Return the last slot strictly before before_ms (None if there is none)."""
        if self.every_ms is not None:
            return (before_ms - 1) // self.every_ms * self.every_ms
        return _ms(next(CronSim(str(self.cron), self._local(before_ms), reverse=True), None))

    def slots(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """Return up to limit slots in (after_ms, until_ms], oldest first."""
        out: list[int] = []
        slot = self.next_after(after_ms)
        while slot <= until_ms and len(out) < limit:
            out.append(slot)
            slot = self.next_after(slot)
        return out

    def _local(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, ZoneInfo(self.timezone))


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)
