"""Fault run: SIGKILL the primary under steady load, let Sentinel (or the Cluster) fail over,
then count what happened to every submit the client was told was accepted.

A submitter thread enqueues `record` tasks one by one as fast as it can; two real
`dtq_worker --with-scheduler --with-reaper` processes run them; the handler appends one line
per execution to a witness file. A few seconds in, the primary is killed by its pid. When the
load stops, the run waits for every acknowledged task to finish and reports:

- acknowledged: enqueue() returned an id;  refused: it raised (the caller knew);
- succeeded / other: the final state of each acknowledged task on the new primary;
- lost: acknowledged, but no record and no execution: the loss the docs describe;
- re-executed: ran more than once (a finalize the failover rolled back runs again).

--lag s stops the replicas for s seconds before the kill (a replica that fell behind, as on a
slow link): what the primary acknowledged meanwhile is what SUBMIT_REPLICAS protects.

    .venv/bin/python -m tests.failover_load --topology sentinel --submit-replicas 1
    .venv/bin/python -m tests.failover_load --topology cluster --submit-replicas 0
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "tests"


@dataclass
class Outcome:
    """What one fault run saw."""

    topology: str
    submit_replicas: int
    acknowledged: int = 0
    refused: int = 0
    states: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    re_executed: int = 0
    failover_seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.topology}, SUBMIT_REPLICAS={self.submit_replicas}: "
            f"acknowledged {self.acknowledged}, refused {self.refused}, "
            f"final states {dict(sorted(self.states.items()))}, lost {self.lost}, "
            f"re-executed {self.re_executed}, failover {self.failover_seconds:.1f}s"
        )


def _settings_env(dtq: dict[str, Any], url: str, prefix: str, witness: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DTQ_REDIS_URL=url,
        DTQ_KEY_PREFIX=prefix,
        DTQ_WITNESS=str(witness),
        PYTHONPATH=str(ROOT),
        DTQ_TEST_OVERRIDES=json.dumps(dtq),
    )
    env.pop("DTQ_FAILPOINTS", None)
    return env


def run(
    topology: str,
    submit_replicas: int,
    seconds: float = 12.0,
    kill_at: float = 4.0,
    lag: float = 0.0,
) -> Outcome:
    """Run one fault run on a topology of its own ("sentinel" or "cluster") and return it."""
    from tests.topology import LocalCluster, LocalSentinel, free_block

    work = Path(tempfile.mkdtemp(prefix="dtq-failover-"))
    witness = work / "witness.jsonl"
    prefix = "fo" + uuid.uuid4().hex[:8]
    # Two replicas: after the failover the new primary still has one to confirm writes.
    servers: Any
    if topology == "sentinel":
        servers = LocalSentinel(free_block(), replicas=2).start()
        url = servers.primary().url
        dtq = {"REDIS_SENTINELS": servers.addresses, "REDIS_SENTINEL_SERVICE": "dtqprimary"}
    else:
        servers = LocalCluster(free_block(), replicas=2).start()
        url = servers.not_owner("{0}").url
        dtq = {"REDIS_CLUSTER": True}
    dtq.update(REDIS_URL=url, SUBMIT_REPLICAS=submit_replicas, SUBMIT_REPLICAS_TIMEOUT=1.0)
    env = _settings_env(dtq, url, prefix, witness)
    os.environ.update(
        {
            k: env[k]
            for k in (
                "DJANGO_SETTINGS_MODULE",
                "DTQ_REDIS_URL",
                "DTQ_KEY_PREFIX",
                "DTQ_TEST_OVERRIDES",
            )
        }
    )
    import django

    django.setup()
    from tests.testapp import tasks

    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "dtq_worker",
                "--queue",
                QUEUE,
                "--with-scheduler",
                "--with-reaper",
                "--concurrency",
                "8",
            ],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(work / "workers.log", "ab"),  # noqa: SIM115
        )
        for _ in range(2)
    ]
    outcome = Outcome(topology, submit_replicas)
    acknowledged: list[str] = []
    try:
        killer = threading.Thread(target=_kill, args=(servers, topology, kill_at, lag, outcome))
        killer.start()
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                acknowledged.append(tasks.record.enqueue(n).id)
            except Exception:  # any refusal: the caller was told, nothing was promised
                outcome.refused += 1
                time.sleep(0.01)
        killer.join()
        outcome.acknowledged = len(acknowledged)
        _settle(outcome, acknowledged, witness)
    finally:
        for proc in workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    return outcome


def _kill(servers: Any, topology: str, at: float, lag: float, outcome: Outcome) -> None:
    time.sleep(at)
    started = time.monotonic()
    if topology == "sentinel":
        servers.fail_over(lag=lag)
    else:
        servers.fail_over("{0}", lag=lag)
    outcome.failover_seconds = time.monotonic() - started


def _settle(
    outcome: Outcome, acknowledged: list[str], witness: Path, timeout: float = 90.0
) -> None:
    """Wait until every acknowledged task is terminal (or gone), then count the states."""
    from dtq.engine import read_side

    terminal = {"SUCCEEDED", "FAILED", "DEAD_LETTERED", "CANCELLED", "EXPIRED"}
    deadline = time.monotonic() + timeout
    while True:
        states = {}
        for task_id in acknowledged:
            try:
                record = read_side.get_task(task_id)
            except Exception:
                record = {"state": "UNREADABLE"}
            states[task_id] = record["state"] if record else "MISSING"
        if all(s in terminal or s == "MISSING" for s in states.values()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1.0)
    rows = witness.read_text().splitlines() if witness.exists() else []
    executions = collections.Counter(json.loads(line)["id"] for line in rows if line)
    outcome.states = dict(collections.Counter(states.values()))
    outcome.re_executed = sum(1 for count in executions.values() if count > 1)
    # A task whose record is missing but that ran was not lost: it was executed.
    outcome.lost = sum(1 for i, s in states.items() if s == "MISSING" and i not in executions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topology", choices=("sentinel", "cluster"), default="sentinel")
    parser.add_argument("--submit-replicas", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument(
        "--lag", type=float, default=0.0, help="stop the replicas this long before the kill"
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    opts = parser.parse_args()
    outcome = run(opts.topology, opts.submit_replicas, opts.seconds, lag=opts.lag)
    if opts.json:
        print(json.dumps(dataclasses.asdict(outcome)))
    else:
        print(outcome.line() + (f", replicas {opts.lag:g}s behind" if opts.lag else ""))


if __name__ == "__main__":
    main()
