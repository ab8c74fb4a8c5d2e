"""Task ids: URL-safe, sortable by creation time, carrying their shard."""

from __future__ import annotations

import functools
import os
import re
import struct
import time
from collections.abc import Iterator

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
ID_PATTERN = re.compile(r"^[0-9a-hjkmnp-tv-z]{22}$")  # use fullmatch: "$" also matches "\n"


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # every 10-bit value as 2 chars


def _encode(number: int, width: int) -> str:
    """Return the low 5 x width bits of number in width characters (width is even)."""
    # A list, not a generator: join() makes one from a generator anyway (slower, per id).
    return "".join([_PAIRS[(number >> shift) & 1023] for shift in range(5 * width - 10, -1, -10)])


# The random part comes from os.urandom 2 KiB at a time (256 draws): a syscall per id cost
# ~4% of a bulk submit's client CPU. A C iterator's next() is atomic under the GIL, so two
# threads never get the same draw; a forked child forgets the draws its parent had left.
_draws: Iterator[tuple[int]] = iter(())


def _random50() -> int:
    """Return 50 random bits of os.urandom's."""
    global _draws
    drawn = next(_draws, None)
    if drawn is None:
        _draws = struct.iter_unpack("<Q", os.urandom(8 * 256))
        drawn = next(_draws)
    return int(drawn[0]) & (1 << 50) - 1


def _forget_draws() -> None:
    global _draws
    _draws = iter(())


os.register_at_fork(after_in_child=_forget_draws)


def new_id(shard: int = 0) -> str:
    """Return a new id: 10 chars of milliseconds, 2 of shard, 10 random."""
    return _stem(time.time_ns() // 1_000_000, shard) + _encode(_random50(), 10)


@functools.lru_cache(maxsize=64)
def _stem(millis: int, shard: int) -> str:
    """Return an id's first 12 characters (cached: a bulk call makes many ids a millisecond)."""
    return _encode(millis << 10 | shard, 12)


def is_valid(task_id: str) -> bool:
    """Return True when task_id has the shape of a dtq id."""
    return isinstance(task_id, str) and bool(ID_PATTERN.fullmatch(task_id))


def shard_of(task_id: str) -> int:
    """Return the shard encoded in a task id."""
    return _INDEX[task_id[10]] * 32 + _INDEX[task_id[11]]


def created_ms(task_id: str) -> int:
    """Return the creation time encoded in a task id, in milliseconds."""
    value = 0
    for char in task_id[:10]:
        value = value * 32 + _INDEX[char]
    return value
