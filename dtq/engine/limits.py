"""Flow-control limits: parse and check them, and encode a task's for its record (lib.lua)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtq.engine.errors import InvalidTaskError

RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour)\s*$")
PERIOD_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}
MAX_COUNT = 1_000_000
MAX_CONCURRENCY = 100_000
MAX_KEY_LENGTH = 200
KEY_VALUE = re.compile(r"^[^\x00-\x1f\x7f|]{1,200}$")  # printable; '|' separates lim's parts


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` starts per `period_ms`, with up to `burst` of them at once."""

    count: int
    period_ms: int
    burst: int = 1

    def encoded(self) -> str:
        """Return the "<count>|<period ms>|<burst>" form lib.lua reads."""
        return f"{self.count}|{self.period_ms}|{self.burst}"

    def __str__(self) -> str:
        units = {1000: "s", 60_000: "m", 3_600_000: "h"}
        text = f"{self.count}/{units.get(self.period_ms, f'{self.period_ms}ms')}"
        return text if self.burst == 1 else f"{text} (burst {self.burst})"


def parse_rate(text: object, burst: object = None) -> Rate:
    """Return the Rate of "N/s", "N/m", "N/h" (also "N/10s"), or raise ValueError."""
    match = RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"invalid rate {text!r}: use '<count>/<unit>' with unit s, m or h, e.g. '10/s'"
        )
    count, multiple, unit = int(match[1]), int(match[2] or 1), match[3][0]
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"invalid rate {text!r}: the count must be in 1..{MAX_COUNT}")
    if multiple < 1:
        raise ValueError(f"invalid rate {text!r}: the period must be at least one {unit}")
    return Rate(count, multiple * PERIOD_MS[unit], check_burst(burst))


def check_burst(burst: object) -> int:
    """Return a valid burst (None: 1), or raise ValueError."""
    if burst is None:
        return 1
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_COUNT:
        raise ValueError(f"burst must be an int in 1..{MAX_COUNT}, got {burst!r}")
    return burst


def check_concurrency(value: object) -> int:
    """Return a valid max_concurrency, or raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise ValueError(f"max_concurrency must be an int in 1..{MAX_CONCURRENCY}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """A task's declared limits; concurrency_key names the argument that partitions them."""

    max_concurrency: int | None = None
    rate: Rate | None = None
    concurrency_key: str | None = None

    def encoded(
        self,
        func: Callable[..., Any] | None,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> str:
        """Return the record's 'lim' field for one call (the key argument's value resolved)."""
        key = "" if self.concurrency_key is None else key_value(self, func, args, kwargs)
        conc = "" if self.max_concurrency is None else str(self.max_concurrency)
        rate = self.rate.encoded() if self.rate else "||"
        return f"{conc}|{rate}|{key}"


def key_value(
    limits: TaskLimits,
    func: Callable[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    """Return the concurrency key argument's value as text, or raise InvalidTaskError."""
    name = limits.concurrency_key or ""
    if name in kwargs:
        value = kwargs[name]
    else:
        try:
            bound = inspect.signature(func).bind_partial(*args, **kwargs) if func else None
        except (TypeError, ValueError):
            bound = None
        if bound is None or name not in bound.arguments:
            raise InvalidTaskError(f"concurrency_key {name!r}: the call passes no such argument")
        value = bound.arguments[name]
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidTaskError(
            f"concurrency_key {name!r}: the value must be a str or int, got {type(value).__name__}"
        )
    text = str(value)
    if not KEY_VALUE.fullmatch(text):
        raise InvalidTaskError(
            f"concurrency_key {name!r}: the value must be 1-{MAX_KEY_LENGTH} printable "
            f"characters without '|', got {text[:50]!r}"
        )
    return text
