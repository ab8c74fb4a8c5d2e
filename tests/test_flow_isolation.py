"""A queue held at its limit with 100,000 waiting tasks costs the other queues nothing.

Built through the real scripts (submit, read, claim, finalize) on a private Redis server, so
INFO commandstats counts only what this test sends; no timing assertions, command counts only.
"""

from __future__ import annotations

from typing import Any

import pytest

from dtq.engine import codec, layout, ops
from dtq.engine.connection import get_client
from dtq.engine.submit import Submission, submit_many
from tests.ops_support import ACTOR, claim_by_hand, keys
from tests.script_calls import Scripts
from tests.test_api_support import RECORD

pytestmark = pytest.mark.django_db(transaction=True)  # a limit change writes an audit row

LIMITED, OTHER = "reports", "other"
WAITERS = 100_000
MEASURED = 500  # tasks claimed and finalized on the other queue per measurement
BATCH = 50  # tasks per claim and finalize call, like a worker's batch


def submit_bulk(queue: str, n: int, chunk: int = 5000) -> None:
    """Submit n `record` tasks to queue through submit.lua, pipelined."""
    for start in range(0, n, chunk):
        subs = [
            Submission(name=RECORD, queue=queue, args=[i])
            for i in range(start, min(start + chunk, n))
        ]
        assert not [r for r in submit_many(subs) if isinstance(r, Exception)]


def command_stats(client: Any) -> dict[str, tuple[int, int]]:
    """Return {command: (calls, usec)} so far, INFO itself left out."""
    stats = client.info("commandstats")
    return {
        k[len("cmdstat_") :]: (int(v["calls"]), int(v["usec"]))
        for k, v in stats.items()
        if k != "cmdstat_info"
    }


def claim_and_finalize(queue: str, n: int) -> None:
    """Claim n queued tasks of queue in worker-sized batches and record success for each."""
    scripts = Scripts.of(get_client())
    data = codec.dumps(None)
    done = 0
    while done < n:
        claimed = claim_by_hand(queue, BATCH, worker="measured")
        assert claimed, f"only {done} of {n} tasks could be claimed on {queue}"
        refs = [layout.TaskRef(c["id"], queue, c["idem"]) for c in claimed]
        k, argv = layout.build(keys(), [queue], refs, layout=layout.of("finalize"))
        args: list[Any] = []
        for c in claimed:
            history = codec.dumps({"attempt": c["attempt"], "outcome": "success"})
            args += [1, c["band"], c["entry"], c["attempt"], "success", data, history, 0]
        applied = scripts.finalize(keys=k, args=[*argv, "1", "measured", *args])
        assert sum(1 for state in applied[::2] if state) == len(claimed)
        done += len(claimed)


def measure(client: Any) -> dict[str, tuple[int, int]]:
    """Return the commands (calls, usec) of claiming and finalizing MEASURED tasks on OTHER."""
    submit_bulk(OTHER, MEASURED)
    before = command_stats(client)
    claim_and_finalize(OTHER, MEASURED)
    after = command_stats(client)
    return {
        name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
        for name, (calls, usec) in after.items()
        if calls != before.get(name, (0, 0))[0]
    }


def total_calls(stats: dict[str, tuple[int, int]]) -> int:
    return sum(calls for calls, _ in stats.values())


def script_usec(stats: dict[str, tuple[int, int]]) -> int:
    """Return the time spent in scripts (commands they call included)."""
    return sum(stats.get(name, (0, 0))[1] for name in ("evalsha", "fcall", "eval"))


def test_a_queue_at_its_limit_with_100k_waiters_does_not_slow_another(
    dtq_env: Any, private_redis: Any
) -> None:
    client = dtq_env.client
    measure(client)  # warm up: scripts loaded, the other queue's consumer group made
    baseline = measure(client)
    ops.set_queue_limits(LIMITED, actor=ACTOR, max_concurrency=1)
    submit_bulk(LIMITED, WAITERS)
    parked = 0
    while client.zcard(keys().limit_wait(LIMITED)) < WAITERS - 1:
        assert claim_by_hand(LIMITED, 1000, worker="holder") or parked, "nothing was claimed"
        parked += 1
        assert parked <= WAITERS // 1000 + 5, "the limited queue's tasks were not parked"
    assert client.zcard(keys().limit_held(LIMITED)) == 1  # one runs, the rest wait
    loaded = measure(client)
    print(  # the figures docs/flow-control.md records (pytest -s shows them)
        f"\n{MEASURED} tasks claimed + finalized on {OTHER!r}: no waiters "
        f"{total_calls(baseline)} commands, script time {script_usec(baseline)} us; "
        f"{WAITERS - 1} waiters on {LIMITED!r}: {total_calls(loaded)} commands, "
        f"script time {script_usec(loaded)} us"
    )
    # The same commands, as many of each: nothing on the other queue reads the line. (A few
    # EXPIREs of time-bucketed counters come and go with the clock: a little slack for those.)
    clocked = {"expire"}
    assert set(loaded) - clocked == set(baseline) - clocked
    for name, (calls, _) in loaded.items():
        expected = baseline.get(name, (0, 0))[0]
        assert abs(calls - expected) <= 2 + expected // 100, (name, calls, expected)
    assert client.zcard(keys().limit_wait(LIMITED)) == WAITERS - 1  # still parked, untouched
