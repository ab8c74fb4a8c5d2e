"""The script gateway's seam: declared replies match the Lua, constants have one source."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from dtq.engine import gateway, layout, protocol, scripts
from dtq.engine.executor import Attempt

LUA = resources.files("dtq.engine") / "lua"
ENGINE = Path(gateway.__file__).parent
# reply_<name>(out, v1, v2, ...): positional, one value per declared field, in order.
BUILT = re.compile(r"\breply_(\w+)\(")


def _call_args(text: str, start: int) -> list[str]:
    """Return the top-level arguments of the call whose '(' ends at start."""
    args, depth, quote, current = [], 0, "", ""
    for ch in text[start:]:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return [*args, current.strip()]
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += ch
    raise AssertionError("unterminated call")


def test_every_reply_the_lua_builds_has_exactly_the_declared_fields() -> None:
    declared = {reply.name: reply.names for reply in gateway.REPLIES}
    seen: set[str] = set()
    for name in (*scripts.NAMES, "lib"):  # lib.lua: claim_entry builds claim's and take's
        body = (LUA / f"{name}.lua").read_text()
        code = "\n".join(line.split("--")[0] for line in body.splitlines())
        for match in BUILT.finditer(code):
            reply = match.group(1)
            assert reply in declared, f"{name}.lua builds undeclared reply {reply!r}"
            args = _call_args(code, match.end())
            assert len(args) == 1 + len(declared[reply]), f"{name}.lua: {reply} {args}"
            seen.add(reply)
    assert seen == set(declared)


def test_a_reply_builder_names_its_fields_in_order() -> None:
    for reply in gateway.REPLIES:
        head = f"local function reply_{reply.name}(out, {', '.join(reply.names)})"
        assert reply.lua_builder().startswith(head)


def test_an_attempts_claim_fields_are_the_claimed_reply() -> None:
    marked = [f for f in Attempt.__dataclass_fields__.values() if "claim" in f.metadata]
    assert gateway.CLAIMED.names == tuple(f.name for f in marked)
    assert "local function reply_claimed(out, id, entry, queue_index," in scripts.source("claim")


def test_a_decoded_reply_is_built_by_field_name() -> None:
    [entry] = gateway.ENTRY.decode(["2", "0", "1-1", "t1", ""])
    assert entry == gateway.Entry(queue_index=2, band=0, entry="1-1", task_id="t1", idem="")
    [att] = gateway.CLAIMED.decode(["t", "1-1", 1, 1, "n", "[]", 3, 5, "", "{}", "", "", "9"])
    assert (att.attempt, att.max_attempts, att.timeout, att.queue_index) == (3, 5, None, 1)
    assert (att.queued_ms, att.claimed_ms) == (0, 9)  # '': a record without the time


def test_constants_come_from_protocol_only() -> None:
    lib = (LUA / "lib.lua").read_text()
    for name in ("STATE_ORDER", "TERMINAL", "COUNTER", "LATENCY_BUCKETS"):
        assert f"local {name} =" not in lib, f"{name} is generated from protocol.py"
        assert f"local {name} = {{" in scripts.lib_text()
    text = scripts.source("claim")  # limit_wait, counted by admit()
    buckets = ", ".join(map(str, protocol.LATENCY_BUCKETS_MS))
    assert f"local LATENCY_BUCKETS = {{{buckets}}}" in text


def test_every_counter_a_script_counts_is_declared() -> None:
    counted = set()
    for path in LUA.iterdir():
        counted |= set(re.findall(r"\bcount\(\w+, '(\w+)'", path.read_text()))
    assert counted, "no count() call found: the pattern is stale"
    assert counted <= set(protocol.COUNTERS)
    assert set(protocol.COUNTER_OF_STATE.values()) <= set(protocol.COUNTERS)


GATEWAY = {"gateway.py", "direct.py", "layout.py", "scripts.py"}
DTQ = ENGINE.parent
# What builds a call's KEYS or ARGV, or sends one: only the gateway's modules may say these.
CALL_BUILDERS = ("layout.build(", "call_script", "register_script", ".script(", "EVALSHA")
ARGV_BUILDERS = ("queue_index(", "task_block(", "queue_block(", "shared_keys(", "_task_args")


def test_every_counter_a_surface_shows_is_one_the_scripts_keep() -> None:
    from dtq.api.metrics import COUNTERS as METRICS
    from dtq.management.commands.dtq_status import SHOWN_COUNTERS

    assert set(METRICS) <= set(protocol.COUNTERS)
    assert set(SHOWN_COUNTERS) <= set(protocol.COUNTERS)


def test_every_event_kind_a_script_emits_is_documented() -> None:
    emitted = set()
    for path in LUA.iterdir():
        # emit/event('KIND', ...) or an event written directly (submit.lua: '{"type":"KIND", ...').
        pattern = r"\b(?:emit|event|event_of_many)\('(TASK_\w+)'|\"type\":\"(TASK_\w+)\""
        for via_emit, direct in re.findall(pattern, path.read_text()):
            emitted.add(via_emit or direct)
    assert len(emitted) > 10, "the emit() pattern is stale"
    lifecycle = (DTQ.parent / "docs" / "task-lifecycle.md").read_text()
    documented = set(re.findall(r"`(TASK_[A-Z_]+)`", lifecycle))
    assert emitted == documented


def test_only_the_gateway_builds_script_calls() -> None:
    offenders = []
    for path in DTQ.rglob("*.py"):
        if path.parent == ENGINE and path.name in GATEWAY:
            continue
        text = re.sub(r"#.*", "", path.read_text())  # a comment may name them
        for needle in CALL_BUILDERS + ARGV_BUILDERS:
            if needle in text:
                offenders.append(f"{path.relative_to(DTQ)}: {needle}")
    assert offenders == []


def test_outside_the_gateway_layout_gives_only_its_value_types() -> None:
    allowed = {"TaskRef", "STATE_ORDER", "py"}  # "py": a mention of layout.py
    used = set()
    for path in DTQ.rglob("*.py"):
        if path.parent == ENGINE and path.name in GATEWAY:
            continue
        text = re.sub(r"#.*", "", path.read_text())
        used |= set(re.findall(r"\blayout\.(\w+)", text))
        for names in re.findall(r"from dtq\.engine\.layout import ([\w, ]+)", text):
            used |= {n.strip() for n in names.split(",")}
    assert used <= allowed, used - allowed


def test_the_call_grep_would_see_a_module_building_argv() -> None:
    """The needles above still match how the gateway builds calls (else the grep is stale)."""
    text = (ENGINE / "gateway.py").read_text()
    assert "layout.build(" in text and "layout.queue_index(" in text
    assert "call_script" in text and ".script(" in text


def _attempt(claimed: dict, worker: str) -> Attempt:
    return Attempt(
        id=claimed["id"],
        entry=claimed["entry"],
        queue_index=1,
        band=claimed["band"],
        name="n",
        payload="{}",
        attempt=claimed["attempt"],
        max_attempts=3,
        timeout=None,
        retry="{}",
        idem=claimed["idem"],
        queue="tests",
    )


def test_finalize_says_what_it_decided_per_outcome(dtq_env) -> None:
    import asyncio

    from dtq.engine.connection import new_async_client
    from dtq.engine.direct import AsyncCaller
    from dtq.engine.executor import Outcome
    from tests.ops_support import claim_by_hand, keys
    from tests.testapp import tasks

    tasks.record.enqueue(1)
    tasks.record.enqueue(2)
    first, second = claim_by_hand("tests", 2)
    dtq_env.client.hset(keys().task(first["id"]), "cancel", "1")  # requested while it ran
    retry = Outcome("retry", '{"class": "E", "message": "m"}', '{"attempt": 1}', 10)

    async def run() -> list[list[gateway.Decided]]:
        caller = AsyncCaller(new_async_client())
        batch = [(_attempt(first, "ghost"), retry), (_attempt(second, "ghost"), retry)]
        try:
            sent = await gateway.finalize(caller, keys(), batch, True, "ghost")
            again = await gateway.finalize(caller, keys(), batch, True, "ghost")  # a resend
            # Another worker's outcome (its own history entry) for the same attempt: stale.
            theirs = Outcome("retry", retry.data, '{"attempt": 1, "worker": "other"}', 10)
            stale = await gateway.finalize(caller, keys(), [(batch[1][0], theirs)], True, "other")
        finally:
            await caller.aclose()
        return [sent, again, stale]

    sent, again, stale = asyncio.run(run())
    # The retry finalize turned into a cancel is reported as CANCELLED (task_finished goes out).
    assert sent == [gateway.Decided("CANCELLED", False), gateway.Decided("RETRYING", False)]
    assert again == [gateway.Decided("CANCELLED", True), gateway.Decided("RETRYING", True)]
    assert stale == [gateway.Decided("", False)]  # fenced out: no signal


def test_every_script_header_says_why_a_resend_is_safe() -> None:
    for name in (*scripts.NAMES, *scripts.STANDALONE):
        header = [
            line for line in (LUA / f"{name}.lua").read_text().splitlines() if line[:2] == "--"
        ]
        assert any(line.startswith("-- Resend:") for line in header), name


def test_a_script_with_its_own_layout_gets_every_key_it_names() -> None:
    # A key a layout leaves out is nil in the script: naming it would fail at run time.
    for name, own in layout.LAYOUTS.items():
        text = scripts.source(name)
        constants = own.lua()
        body = text.replace(constants, "")
        for const in set(re.findall(r"\b(?:K|Q|T)_[A-Z0-9]+\b", body)):
            assert re.search(rf"\b{const}\b", constants), f"{name}: {const} is not a layout key"
            at = dict(zip(*(s.split(", ") for s in _assignment(constants, const)), strict=True))
            assert at[const] != "nil", f"{name}.lua uses {const}, which its layout leaves out"
        for state in re.findall(r"\bIX\.(\w+)", body):
            assert state in own.queue, f"{name}.lua uses the {state} index, not in its layout"


def _assignment(constants: str, const: str) -> tuple[str, str]:
    for line in constants.splitlines():
        names, _, values = line.removeprefix("local ").partition(" = ")
        if const in names.split(", "):
            return names, values.split("  --")[0]
    raise AssertionError(const)


def test_the_hot_scripts_get_fewer_keys_than_the_full_layout() -> None:
    assert layout.LAYOUTS.keys() == {"submit", "read", "claim", "take", "finalize", "renew"}
    for own in layout.LAYOUTS.values():
        assert len(own.shared) + len(own.queue) + len(own.task) < 24
