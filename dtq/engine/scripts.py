"""The Lua scripts as text: lib.lua's prelude (with protocol.py's constants) and each body.

A Script is plain data (name, text, SHA); direct.py sends it and reloads it after NOSCRIPT.
The Library holds the hot scripts as functions of one Redis Functions library (Redis >= 7.0),
each with its prelude built once when the library loads instead of on every call.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

from dtq.engine import layout, protocol

NAMES = (
    "submit",
    "submit_one",
    "read",
    "claim",
    "take",
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
# A top-level local of the prelude is per-call state when its value comes from the call (KEYS,
# ARGV, a command) or from other per-call state, when it starts as an empty table (filled
# during the call), or when anything assigns it again. In a library it is declared once and
# set again at the start of every call; every other top-level local is built once at load.
TOP_LOCAL = re.compile(r"^local (?!function )([\w, ]+?) = ")
FROM_CALL = re.compile(r"\b(?:KEYS|ARGV|redis)\b|\{\s*\}")
DECLARED = re.compile(r"\b(?:local|for)\s+[\w, ]+?\s*=")
# Names on the left of an assignment (may also match a table field: at worst a constant is
# then set again on each call, never per-call state built once).
# (Possessive: a name list is read one way only, which halves the time this takes.)
ASSIGNED = re.compile(r"(?<![^\s;(])((?:\w++[ \t]*+,[ \t]*+)*+\w++)[ \t]*+=(?!=)")
# The scripts every task runs: Redis functions where the server has them (the others stay
# EVALSHA scripts). Measured: with every script in the library the hot calls cost Redis more
# CPU time than as EVALSHA scripts, with these alone less (docs/performance.md); submit_one is
# submit for one task (enqueue()); take is the worker's read and claim in one call.
FUNCTIONS = ("submit", "submit_one", "take", "claim", "finalize")
LIBRARY = "dtq_LIBRARY"  # the library's name in its text until the text's hash names it


@dataclass(frozen=True, slots=True)
class Library:
    """The FUNCTIONS as Redis functions: the library's text and name, and each function's name
    by the SHA of the script it runs (a script not in the library has none)."""

    name: str
    text: str
    functions: dict[str, str]


@dataclass(frozen=True, slots=True)
class Script:
    """One script's full text and the SHA1 EVALSHA names it by."""

    name: str
    text: str
    sha: str


WORD = re.compile(r"\w+")


def _words(code: str) -> set[str]:
    return set(WORD.findall(COMMENT.sub("", code)))


# Every script's text is built from the same lib.lua paragraphs (only the layout's differs),
# so each paragraph is read once per process: building the library on a process's first call
# took ~22 ms, all of it spent reading the same paragraphs again.
@lru_cache(maxsize=512)
def _paragraph(paragraph: str) -> tuple[frozenset[str], frozenset[str]]:
    """Return the names a lib.lua paragraph defines and the words it uses."""
    defined = frozenset(n.strip() for m in DEFINED.findall(paragraph) for n in m.split(","))
    return defined, frozenset(_words(paragraph))


@lru_cache(maxsize=512)
def _assigned(code: str) -> frozenset[str]:
    """Return the names code assigns to (declarations left out), by paragraph as _paragraph."""
    text = DECLARED.sub("", COMMENT.sub("", code))
    return frozenset(n.strip() for m in ASSIGNED.findall(text) for n in m.split(","))


def _used_lib(lib: str, body: str) -> str:
    """Return the paragraphs of lib.lua that body needs, directly or through each other.

    Every paragraph runs on every call (tables, closures), so a script that leaves out the
    helpers it never calls costs Redis less per call.
    """
    paragraphs = lib.split("\n\n")
    names = [_paragraph(p)[0] for p in paragraphs]
    words = _words(body)
    used = [not n for n in names]  # comment-only paragraphs (the header) are kept
    grew = True
    while grew:
        grew = False
        for i, defined in enumerate(names):
            if not used[i] and defined & words:
                used[i] = grew = True
                words |= _paragraph(paragraphs[i])[1]
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
def _body(name: str) -> str:
    """Return the named script's own text (lua/<name>.lua)."""
    return (resources.files("dtq.engine") / "lua" / f"{name}.lua").read_text()


@cache
def _lib_of(name: str) -> str:
    """Return the part of lib.lua the named script uses (its EVALSHA text and its function)."""
    return _used_lib(lib_text(name), _body(name))


@cache
def source(name: str) -> str:
    """Return the full text of a script: the lib.lua it uses, then its body as a function.

    The wrapper writes what the body gathered (lib.lua's flush_*: counters, batched sorted-set
    writes, events, then acknowledgements last) after it returns, whichever of its return
    statements it took.
    """
    if name in STANDALONE:
        return _body(name)
    body, lib = _body(name), _lib_of(name)
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


def _statements(prelude: str) -> list[str]:
    """Split text into top-level statements: a line at column 0 and the indented lines after."""
    statements: list[str] = []
    for line in prelude.split("\n"):
        if statements and line[:1] in (" ", "\t", "}"):
            statements[-1] += "\n" + line
        else:
            statements.append(line)
    return statements


def _per_call(prelude: str, body: str) -> tuple[str, str]:
    """Return the prelude with its per-call state declared only, and the Lua that sets it."""
    assigned = _assigned(body).union(*map(_assigned, prelude.split("\n\n")))
    per_call = {"KEYS", "ARGV"}
    kept, sets = [], []
    for statement in _statements(prelude):
        match = TOP_LOCAL.match(statement)
        if match:
            names = {n.strip() for n in match.group(1).split(",")}
            value = COMMENT.sub("", statement[match.end() :])
            if FROM_CALL.search(value) or _words(value) & per_call or names & assigned:
                per_call |= names
                kept.append(f"local {match.group(1)}")
                sets.append(statement[len("local ") :])
                continue
        kept.append(statement)
    return "\n".join(kept), "\n".join(sets)


def _function_block(name: str, function: str) -> str:
    """Return one script as a `do` block of the library that registers its function."""
    body, lib = _body(name), _lib_of(name)
    prelude, sets = _per_call(lib, body)
    flushes = "".join(f"  {f}()\n" for f in FLUSHES if f"local function {f}(" in lib)
    # No flags: writes allowed, and refused as a whole under OOM or on a replica.
    return (
        f"do\nlocal KEYS, ARGV\n{prelude}\n"
        f"local function begin_call(keys, args)\nKEYS, ARGV = keys, args\n{sets}\nend\n"
        f"local function script_body()\n{body}\nend\n"
        f"redis.register_function('{function}', function(keys, args)\n"
        f"  begin_call(keys, args)\n  local reply = script_body()\n{flushes}  return reply\nend)\n"
        "end\n"
    )


@cache
def library() -> Library:
    """Return the FUNCTIONS as one library, named by its text's hash (two dtq versions on one
    server keep their own code)."""
    blocks = "\n".join(_function_block(name, f"{LIBRARY}_{name}") for name in FUNCTIONS)
    text = f"#!lua name={LIBRARY}\n-- dtq's scripts (dtq/engine/scripts.py)\n{blocks}"
    name = "dtq_" + hashlib.sha1(text.encode()).hexdigest()[:16]
    functions = {script(n).sha: f"{name}_{n}" for n in FUNCTIONS}
    return Library(name, text.replace(LIBRARY, name), functions)
