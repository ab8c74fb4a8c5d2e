"""Django's JSON rules for task arguments and return values, in the form JSON text keeps.

django.tasks accepts what ``django.utils.json.normalize_json`` accepts; a backend that stores
JSON text then reads back string keys. dtq applies Django's function first (so what fails on
Django's own backends fails here with the same exception), then makes the value exactly what
the stored text will give back, refusing what JSON text would change or drop.
"""

from __future__ import annotations

import math
from typing import Any

from dtq.compat import normalize_json

INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson, and so dtq's codec, can write


def to_json(value: Any) -> Any:
    """Return value as django.tasks accepts it, with every mapping key turned into text.

    Raise TypeError or ValueError, as normalize_json does, for a value JSON cannot carry.
    """
    return _textual(normalize_json(value))


def _textual(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        original: dict[str, Any] = {}
        for key, item in value.items():
            text = _key(key)
            if text in original:
                first = original[text]
                raise TypeError(f"Unsupported keys: {first!r} and {key!r} are one JSON key")
            original[text], out[text] = key, _textual(item)
        return out
    if isinstance(value, list):
        return [_textual(item) for item in value]
    return _scalar(value)


def _scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"Unsupported value: {value!r} (JSON has no NaN or Infinity)")
    if isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise TypeError("Unsupported value: an integer beyond 64 bits")
    return value


def _key(key: Any) -> str:
    """Return a mapping key as JSON text writes it (the rules of the json module)."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return repr(_scalar(key))
    return str(key)  # int: normalize_json lets no other key type through
