"""Check the cursors and ids that reach the engine from outside: ASCII only, in range.

`str.isdigit()` and `int()` accept '²' and other Unicode digits, and Redis refuses stream ids
past 64 bits: every value a client sends is checked here first and refused with ValueError.
"""

from __future__ import annotations

import re

from dtq.engine import ids

MAX_U64 = 2**64 - 1
MAX_ROW_ID = 2**63 - 1  # the largest primary key a database hands out
_DIGITS = re.compile(r"[0-9]{1,20}")


def number(text: object, what: str, maximum: int = MAX_U64) -> int:
    """Return text as an int of ASCII digits in 0..maximum, else raise ValueError."""
    if not isinstance(text, str) or not _DIGITS.fullmatch(text) or int(text) > maximum:
        raise ValueError(f"invalid {what} {text!r}: use ASCII digits, at most {maximum}")
    return int(text)


def entry_id(value: object) -> str:
    """Return value if it is a stream entry id '<ms>-<seq>' (each part 64 bits), else raise."""
    millis, _, seq = value.partition("-") if isinstance(value, str) else ("", "", "")
    try:
        number(millis, "entry id")
        number(seq, "entry id")
    except ValueError:
        raise ValueError(
            f"invalid entry id {value!r}: use '<milliseconds>-<sequence>', "
            "two ASCII numbers of at most 64 bits each"
        ) from None
    return str(value)


def task_cursor(value: object) -> tuple[int, str]:
    """Return (score, task id) from a task-list cursor '<score>:<task id>', else raise."""
    score, _, task_id = value.partition(":") if isinstance(value, str) else ("", "", "")
    try:
        parsed = number(score, "cursor")
    except ValueError:
        parsed = -1
    if parsed < 0 or not ids.is_valid(task_id):
        raise ValueError(f"invalid cursor {value!r}: pass back a next_cursor you were given")
    return parsed, task_id


def audit_cursor(value: object) -> int:
    """Return the audit-log cursor (a row id) as an int, else raise ValueError."""
    cursor = number(value, "cursor", MAX_ROW_ID)
    if cursor < 1:
        raise ValueError(f"invalid cursor {value!r}: pass back a next_cursor you were given")
    return cursor
