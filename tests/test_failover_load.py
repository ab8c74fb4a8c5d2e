"""Fault runs (tests/failover_load.py): the primary SIGKILLed under load, replicas 1 s behind.

With SUBMIT_REPLICAS=1 every acknowledged submit reaches a final state; without it, the
submits the replicas had not received are lost, as docs/scaling.md says.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.topology import require_redis_server

pytestmark = [pytest.mark.slow, pytest.mark.scaleout, pytest.mark.timeout(240)]


def fault_run(topology: str, submit_replicas: int) -> dict[str, Any]:
    require_redis_server()
    command = [sys.executable, "-m", "tests.failover_load", "--topology", topology]
    command += ["--submit-replicas", str(submit_replicas), "--seconds", "8", "--lag", "1"]
    command += ["--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("topology", ["sentinel", "cluster"])
def test_durable_submit_loses_no_acknowledged_task(topology):
    outcome = fault_run(topology, 1)
    assert outcome["acknowledged"] > 1000
    assert outcome["lost"] == 0
    assert outcome["states"] == {"SUCCEEDED": outcome["acknowledged"]}


def test_without_durable_submit_what_the_replicas_missed_is_lost():
    outcome = fault_run("sentinel", 0)
    missing = outcome["states"].get("MISSING", 0)
    assert outcome["states"].get("SUCCEEDED", 0) + missing == outcome["acknowledged"]
    # Lost: acknowledged while the replicas were behind, with no record and no execution; a
    # missing record whose task ran was executed (its record lost with the primary), not lost.
    # How many are lost depends on where the kill lands (0 in some runs, hundreds in most):
    # the harness prints it; docs/scaling.md gives measured figures.
    assert outcome["lost"] <= missing
