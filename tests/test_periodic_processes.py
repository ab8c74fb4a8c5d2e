"""Real processes: three dtq_scheduler processes fire a 1-second schedule while they are
SIGKILLed and restarted at random, near fire times; every slot runs exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter

from tests.conftest import Env, wait_for

SCHEDULERS = 3
# The issue asks for 30 s; 15 s by default keeps the suite bearable on a shared 2-core box.
SECONDS = float(os.environ.get("DTQ_PERIODIC_CHAOS_SECONDS", "15"))


def ticks(env: Env) -> list[dict]:
    return env.witnessed("tick")


def missing_count(slots: list[int]) -> int:
    return len(set(range(slots[0], slots[-1] + 1, 1000)) - set(slots))


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_schedulers_killed_at_random_fire_every_slot_once(dtq_env: Env) -> None:
    dtq_env.configure(TASK_MODULES=["tests.testapp.django_tasks", "tests.testapp.periodic_tasks"])
    dtq_env.worker("--concurrency", "4")
    schedulers = [dtq_env.spawn("dtq_scheduler") for _ in range(SCHEDULERS)]
    wait_for(lambda: ticks(dtq_env), timeout=30)
    rng = random.Random(os.environ.get("DTQ_CHAOS_SEED", "16"))
    kills = 0
    end = time.time() + SECONDS
    while time.time() < end:
        # act just before or just after a slot (slots are whole seconds)
        time.sleep(max(0.0, 1 - time.time() % 1 + rng.uniform(-0.08, 0.08) + rng.choice((0, 1))))
        i = rng.randrange(SCHEDULERS)
        if schedulers[i].poll() is None:
            kill(schedulers[i])
            kills += 1
        else:
            schedulers[i] = dtq_env.spawn("dtq_scheduler")
    for i, proc in enumerate(schedulers):  # heal
        if proc.poll() is not None:
            schedulers[i] = dtq_env.spawn("dtq_scheduler")
    healed = time.time()
    wait_for(lambda: max(r["slot"] for r in ticks(dtq_env)) >= (healed + 3) * 1000, timeout=40)

    rows = ticks(dtq_env)
    slots = sorted({r["slot"] for r in rows})
    tasks_per_slot = Counter(slot for slot, _ in {(r["slot"], r["id"]) for r in rows})
    runs_per_task = Counter(r["id"] for r in rows)
    gaps = missing_count(slots)
    print(f"kills={kills} slots={len(slots)} tasks={len(runs_per_task)} missing={gaps}")
    assert kills >= SECONDS / 4
    assert [s for s, n in tasks_per_slot.items() if n > 1] == []  # no slot fired twice
    assert set(runs_per_task.values()) == {1}  # and each firing ran once
    missing = sorted(set(range(slots[0], slots[-1] + 1, 1000)) - set(slots))
    assert missing == []
    assert (slots[-1] - slots[0]) / 1000 >= SECONDS
