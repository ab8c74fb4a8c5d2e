"""Redis Functions: the hot scripts are FCALLed functions of one library on Redis >= 7.0 and
EVALSHA scripts on the embedded 6.2 (the others always); a missing library is loaded again
and the call resent."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest

import dtq
from dtq.embedded import RedisServer
from dtq.engine import gateway, ops
from dtq.engine.connection import new_async_client
from dtq.engine.direct import AsyncCaller
from dtq.engine.scripts import FUNCTIONS, _per_call, library, script
from tests.conftest import Env
from tests.ops_support import ACTOR
from tests.test_write_refusals import BINARIES, OutOfMemory, start_server  # noqa: F401
from tests.testapp import tasks

SEVEN = pytest.mark.skipif(not BINARIES["system"], reason="no system redis-server (7.0)")


def calls(env: Env) -> dict[str, int]:
    """Return how many FCALL and EVALSHA the server ran."""
    stats = env.client.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha")}


def read_with_the_worker_s_caller(env: Env) -> int:
    """Take the tests queue once through an AsyncCaller (as the worker does); count attempts."""

    async def read() -> int:
        client = new_async_client()
        caller = AsyncCaller(client)
        try:
            taken = await gateway.take(
                caller, env.keys, ["tests"], "functions-test", 60000, 10, os.urandom(4).hex()
            )
        finally:
            await caller.aclose()
            await client.aclose()
        return len(taken.attempts)

    return asyncio.run(read())


@pytest.mark.parametrize("binary", [b for b, path in BINARIES.items() if path])
def test_scripts_are_functions_on_redis_7_and_evalsha_on_6_2(
    dtq_env: Env,
    start_server: Callable[..., RedisServer],  # noqa: F811
    binary: str,
) -> None:
    start_server(BINARIES[binary])
    seven = int(dtq_env.client.info("server")["redis_version"].split(".")[0]) >= 7
    tasks.record.enqueue(1)
    tasks.record.enqueue_many([((2,), {}), ((3,), {})])
    assert read_with_the_worker_s_caller(dtq_env) == 3
    ran = calls(dtq_env)
    if seven:
        assert ran == {"fcall": 3, "evalsha": 0}
        [listed] = dtq_env.client.function_list(library=library().name)
        names = {f[1] for f in listed[listed.index("functions") + 1]}
        assert names == {f"{library().name}_{n}" for n in FUNCTIONS}
    else:
        assert ran["fcall"] == 0 and ran["evalsha"] >= 3  # 6.2 also counts NOSCRIPT replies


@SEVEN
def test_a_deleted_or_flushed_library_is_loaded_again_and_the_call_resent(
    dtq_env: Env,
    start_server: Callable[..., RedisServer],  # noqa: F811
) -> None:
    start_server(BINARIES["system"])
    tasks.record.enqueue(1)
    assert read_with_the_worker_s_caller(dtq_env) == 1
    dtq_env.client.function_delete(library().name)
    tasks.record.enqueue(2)  # this thread's connection: "Function not found", load, resend
    dtq_env.client.function_flush()
    tasks.record.enqueue_many([((3,), {}), ((4,), {})])  # pipelined: only the unran resent
    dtq_env.client.function_delete(library().name)
    assert read_with_the_worker_s_caller(dtq_env) == 3  # a new connection: loaded on first use
    assert dtq_env.client.function_list(library=library().name)

    async def read_twice_on_one_connection() -> list[int]:
        client = new_async_client()
        caller = AsyncCaller(client)
        got = []
        try:
            for i in (5, 6):
                tasks.record.enqueue(i)
                taken = await gateway.take(
                    caller, dtq_env.keys, ["tests"], "again", 60000, 10, f"t{i}"
                )
                got.append(len(taken.attempts))
                dtq_env.client.function_delete(library().name)
        finally:
            await caller.aclose()
            await client.aclose()
        return got

    assert asyncio.run(read_twice_on_one_connection()) == [1, 1]
    assert calls(dtq_env)["evalsha"] == 0


@SEVEN
@pytest.mark.django_db(transaction=True)  # the purge is audited
def test_an_operator_still_frees_memory_under_oom_and_enqueue_is_refused(
    dtq_env: Env,
    start_server: Callable[..., RedisServer],  # noqa: F811
) -> None:
    refusal = OutOfMemory(start_server(BINARIES["system"]))
    for i in range(3):
        tasks.record.enqueue(i)
    refusal.begin()
    try:
        with pytest.raises(dtq.WritesRefused):
            tasks.record.enqueue("refused")
        assert ops.purge_queue("tests", actor=ACTOR, reason="out of memory").purged == 3
        assert calls(dtq_env)["evalsha"] >= 1  # an operator's script: EVALSHA, as before
    finally:
        refusal.end()


def test_per_call_state_is_set_at_every_call_and_constants_once() -> None:
    prelude, sets = _per_call(
        "local A, B = tonumber(ARGV[1]), 2\nlocal NOW = A * 1000\nlocal events = {}\n"
        "local ONCE = {1, 2,\n  3}\nlocal FLAG = false\nlocal function f() FLAG = true end",
        "local x = ONCE[1]",
    )
    assert prelude.split("\n")[:3] == ["local A, B", "local NOW", "local events"]
    assert "local ONCE = {1, 2,\n  3}" in prelude and "local FLAG\n" in prelude
    assert sets.split("\n") == [
        "A, B = tonumber(ARGV[1]), 2",
        "NOW = A * 1000",
        "events = {}",
        "FLAG = false",
    ]


def test_the_library_names_every_function_after_its_own_hash() -> None:
    lib = library()
    assert lib.name.startswith("dtq_") and lib.text.startswith(f"#!lua name={lib.name}\n")
    assert len(lib.functions) == len(FUNCTIONS)
    for name in FUNCTIONS:
        function = lib.functions[script(name).sha]
        assert function == f"{lib.name}_{name}"
        assert f"redis.register_function('{function}'," in lib.text
