"""Read side: one worker's page: its heartbeat, what it runs now and for how long, its history."""

from __future__ import annotations

import re
import time
from typing import Any

from dtq.engine import shards
from dtq.engine.read_side.budget import current, execute
from dtq.engine.read_side.query import Query, run
from dtq.engine.read_side.queues import WorkerInfo, _worker
from dtq.engine.state import TERMINAL_STATES

WORKER_ID = re.compile(r"[\w.:@+-]{1,200}", re.ASCII)
HISTORY = 50  # finished attempts listed at most


def _info(worker_id: str) -> WorkerInfo | None:
    keys = shards.keys(shards.HOME)
    pipe = shards.client(shards.HOME).pipeline(transaction=False)
    pipe.zscore(keys.workers, worker_id)
    pipe.hgetall(keys.worker(worker_id))
    score, raw = execute(pipe, current())
    if score is None and not raw:
        return None
    return _worker(worker_id, float(score or 0), raw or {}, time.time())


def worker_detail(worker_id: str) -> dict[str, Any] | None:
    """Return {'worker', 'running', 'history', 'partial'} for one worker, or None if unknown.

    `running` are the tasks RUNNING on it now (with `running_for`, seconds); `history` the
    newest finished tasks whose last attempt it ran. Both read its queues' indexes within the
    read budget, so they can be partial.
    """
    if not WORKER_ID.fullmatch(worker_id):
        return None
    info = _info(worker_id)
    if info is None:
        return None
    queues = [q for q in info["queues"] if isinstance(q, str)] or None
    now = time.time()
    ours = Query(states=["RUNNING"], checks=[lambda r: r.get("worker") == worker_id])
    running = run(ours, 100, queues=queues)
    done = Query(states=sorted(TERMINAL_STATES), checks=[lambda r: _ran_last(r, worker_id)])
    history = run(done, HISTORY, queues=queues)
    for task in running["tasks"]:
        task["running_for"] = max(now - task["started_at"], 0) if task.get("started_at") else None
    return {
        "worker": info,
        "running": running["tasks"],
        "history": history["tasks"],
        "partial": running["partial"] or history["partial"],
    }


def _ran_last(record: dict[str, Any], worker_id: str) -> bool:
    history = record.get("history")
    if not isinstance(history, list):
        return False
    attempts = [h for h in history if isinstance(h, dict) and h.get("worker")]
    return bool(attempts) and attempts[-1].get("worker") == worker_id
