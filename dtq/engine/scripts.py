"""The Lua scripts as text: lib.lua's prelude (with protocol.py's constants) and each body.

A Script is plain data (name, text, SHA); direct.py sends it and reloads it after NOSCRIPT.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from dtq.engine import layout, protocol

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
    "retry_failed",
    "discard",
    "purge",
    "dlq_trim",
    "op_begin",
    "op_renew",
    "op_finish",
    "progress",
    "limits",
    "workflow_sync",
)
# Standalone scripts: one schedule's state hash, none of lib.lua's layout.
STANDALONE = ("periodic_claim", "periodic_commit", "periodic_resume")

FLUSHES = ("flush_counts", "flush_zsets", "flush_events", "flush_acks")  # acks last
DEFINED = re.compile(r"^local (?:function )?([\w, ]+?)(?: =|\()", re.M)
COMMENT = re.compile(r"--.*$", re.M)
GENERATED = "-- @generated constants (protocol.py)"
LAYOUT = "-- @generated layout (layout.py)"


@dataclass(frozen=True, slots=True)
class Script:
    """One script's full text and the SHA1 EVALSHA names it by."""

    name: str
    text: str
    sha: str


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


def lib_text(name: str = "") -> str:
    """Return lib.lua with the named script's key layout, protocol.py's constants and the reply
    builders written in."""
    from dtq.engine import gateway  # the reply declarations; gateway imports this module

    lib = (resources.files("dtq.engine") / "lua" / "lib.lua").read_text()
    generated = protocol.lua_prelude() + "\n\n" + gateway.lua_reply_builders()
    for marker in (GENERATED, LAYOUT):
        if marker not in lib:
            raise RuntimeError(f"lib.lua lost its {marker!r} line")
    return lib.replace(GENERATED, generated).replace(LAYOUT, layout.of(name).lua())


@cache
def source(name: str) -> str:
    """Return the full text of a script: the lib.lua it uses, then its body as a function.

    The wrapper writes what the body gathered (lib.lua's flush_*: counters, batched sorted-set
    writes, events, then acknowledgements last) after it returns, whichever of its return
    statements it took.
    """
    body = (resources.files("dtq.engine") / "lua" / f"{name}.lua").read_text()
    if name in STANDALONE:
        return body
    lib = _used_lib(lib_text(name), body)
    flushes = "".join(f"{f}()\n" for f in FLUSHES if f"local function {f}(" in lib)
    return (
        f"{lib}\nlocal function script_body()\n{body}\nend\n"
        f"local reply = script_body()\n{flushes}return reply\n"
    )


@cache
def script(name: str) -> Script:
    """Return the named script (one of NAMES or STANDALONE)."""
    if name not in NAMES and name not in STANDALONE:
        raise ValueError(f"no script named {name!r}")
    text = source(name)
    return Script(name, text, hashlib.sha1(text.encode()).hexdigest())
