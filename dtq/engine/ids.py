"""Task ids: URL-safe, sortable by creation time, carrying their shard."""

from __future__ import annotations

import re
import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
ID_PATTERN = re.compile(r"^[0-9a-hjkmnp-tv-z]{22}$")  # use fullmatch: "$" also matches "\n"


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # every 10-bit value as 2 chars


def _encode(number: int, width: int) -> str:
    """Return the low 5 x width bits of number in width characters (width is even)."""
    # A list, not a generator: join() makes one from a generator anyway (slower, per id).
    return "".join([_PAIRS[(number >> shift) & 1023] for shift in range(5 * width - 10, -1, -10)])


def new_id(shard: int = 0) -> str:
    """Return a new id: 10 chars of milliseconds, 2 of shard, 10 random."""
    millis = time.time_ns() // 1_000_000
    return _encode(millis << 60 | shard << 50 | secrets.randbits(50), 22)


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
