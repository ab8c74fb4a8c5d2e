"""The chaos suite, CI-sized, on a local Redis Cluster and behind Sentinel: the process faults
of test_chaos_short plus SIGKILLs of the primary (its replica is promoted, the old primary comes
back as a replica), with SUBMIT_REPLICAS=1, and every invariant checked (lost = 0 included).

`make test-scaleout` runs it; `make chaos CHAOS_TOPOLOGY=cluster` is the full run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos import config
from tests.chaos.test_chaos_short import SEED, checked_run
from tests.topology import require_redis_server

pytestmark = [pytest.mark.slow, pytest.mark.scaleout, pytest.mark.timeout(150)]


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
def test_every_invariant_holds_through_failovers(
    topology: str, settings: Any, tmp_path: Path
) -> None:
    require_redis_server()
    data = checked_run(settings, config.short(SEED, topology=topology), tmp_path / "run")
    kinds = {row["fault"] for row in data.events if row["kind"] == "fault"}
    assert "primary_kill" in kinds and not kinds & {"redis_term", "redis_kill"}
    # Every primary kill was followed by a promotion and by the old primary rejoining.
    assert data.failovers and all(f.promoted for f in data.failovers)
    rejoined = [row for row in data.events if row["kind"] == "replica_back"]
    assert len(rejoined) == len(data.failovers)
