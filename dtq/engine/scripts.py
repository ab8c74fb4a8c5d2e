"""Load the Lua scripts once and call them by SHA (redis-py reloads them after a restart)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

NAMES = (
    "submit",
    "read",
    "claim",
    "finalize",
    "skip",
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
    "workflow_sync",
)


FLUSHES = ("flush_counts", "flush_zsets", "flush_events", "flush_acks")  # acks last
DEFINED = re.compile(r"^local (?:function )?([\w, ]+?)(?: =|\()", re.M)
COMMENT = re.compile(r"--.*$", re.M)


def _words(code: str) -> set[str]:
    return set(re.findall(r"\w+", COMMENT.sub("", code)))


def _used_lib(lib: str, body: str) -> str:
    """Return the paragraphs of lib.lua that body needs, directly or through each other.

    Every paragraph runs on every call (tables, closures), so a script that leaves out the
    helpers it never calls costs Redis less per call.
    """
    paragraphs = lib.split("\n\n")
    names = [{n.strip() for m in DEFINED.findall(p) for n in m.split(",")} for p in paragraphs]
    words = _words(body)
    used = [not n for n in names]  # comment-only paragraphs (the header) are kept
    grew = True
    while grew:
        grew = False
        for i, defined in enumerate(names):
            if not used[i] and defined & words:
                used[i] = grew = True
                words |= _words(paragraphs[i])
    return "\n\n".join(p for p, keep in zip(paragraphs, used, strict=True) if keep)


@cache
def source(name: str) -> str:
    """Return the full text of a script: the lib.lua it uses, then its body as a function.

    The wrapper writes what the body gathered (lib.lua's flush_*: counters, batched sorted-set
    writes, events, then acknowledgements last) after it returns, whichever of its return
    statements it took.
    """
    folder = resources.files("dtq.engine") / "lua"
    body = (folder / f"{name}.lua").read_text()
    lib = _used_lib((folder / "lib.lua").read_text(), body)
    flushes = "".join(f"{f}()\n" for f in FLUSHES if f"local function {f}(" in lib)
    return (
        f"{lib}\nlocal function script_body()\n{body}\nend\n"
        f"local reply = script_body()\n{flushes}return reply\n"
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
