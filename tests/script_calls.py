"""Raw script calls for tests that send exact KEYS and ARGV (e.g. the same call twice)."""

from __future__ import annotations

import hashlib
from typing import Any

from dtq.engine.direct import call_script
from dtq.engine.scripts import Script, script


def raw_script(text: str, name: str = "test") -> Script:
    """Return a Script for arbitrary Lua text (not one of dtq's)."""
    return Script(name, text, hashlib.sha1(text.encode()).hexdigest())


class Scripts:
    """dtq's scripts as attributes: Scripts.of(client).claim(keys=..., args=...) -> raw reply."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    def of(cls, client: Any) -> Scripts:
        return cls(client)

    def __getattr__(self, name: str) -> Any:
        def call(keys: list[Any], args: list[Any]) -> Any:
            return call_script(self._client, script(name), keys, args)

        return call
