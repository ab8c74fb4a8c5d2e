"""Load the Lua scripts once and call them by SHA (redis-py reloads them after a restart)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

NAMES = (
    "submit",
    "read",
    "claim",
    "finalize",
    "promote",
    "reclaim",
    "reconcile",
    "renew",
    "cancel",
    "forget_consumer",
    "forget_queue",
    "pause",
    "replay",
    "discard",
    "purge",
    "dlq_trim",
    "op_begin",
    "op_renew",
    "op_finish",
    "progress",
)


@cache
def source(name: str) -> str:
    """Return the full text of a script: lib.lua, then the script's body run as a function.

    The wrapper writes the counters the body summed up (lib.lua's flush_counts) after it
    returns, whichever of its return statements it took.
    """
    folder = resources.files("dtq.engine") / "lua"
    lib = (folder / "lib.lua").read_text()
    body = (folder / f"{name}.lua").read_text()
    return (
        f"{lib}\nlocal function script_body()\n{body}\nend\n"
        "local reply = script_body()\nflush_counts()\nreturn reply\n"
    )


class Scripts:
    """The registered scripts of one client, as attributes (scripts.submit(...))."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._loaded: dict[str, Any] = {}

    @classmethod
    def of(cls, client: Any) -> Scripts:
        """Return the Scripts bound to client, created once per client."""
        scripts = getattr(client, "_dtq_scripts", None)
        if scripts is None:
            scripts = cls(client)
            client._dtq_scripts = scripts
        return scripts

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in NAMES:
            raise AttributeError(name)
        script = self._loaded.get(name)
        if script is None:
            script = self._client.register_script(source(name))
            self._loaded[name] = script
        return script
