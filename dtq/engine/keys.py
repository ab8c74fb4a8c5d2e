"""Every Redis key name dtq uses, in one place.

Form: ``<prefix>:{<shard>}:<rest>``. The braces are a Redis Cluster hash tag, so every key a
script touches for one shard lands in one slot. Process-wide keys (workers, leaders, the queue
registry) live in shard 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
BANDS = (0, 1, 2)  # 0 = high, 1 = normal, 2 = low; read in this order
GROUP = "dtq"


def band_of(priority: int) -> int:
    """Map a priority in -100..100 to a band (higher priority, lower band number)."""
    if priority > 33:
        return 0
    if priority < -33:
        return 2
    return 1


def check_queue_name(name: object) -> str:
    """Return name if it is a valid queue name, else raise ValueError."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid queue name {name!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one prefix and shard."""

    prefix: str
    shard: int = 0

    def _k(self, rest: str) -> str:
        return f"{self.prefix}:{{{self.shard}}}:{rest}"

    @property
    def tag(self) -> str:
        """The start every key of this shard shares (it names the shard's hash slot)."""
        return self._k("")

    def stream(self, queue: str, band: int) -> str:
        return self._k(f"q:{queue}:{band}")

    def task(self, task_id: str) -> str:
        return self._k(f"t:{task_id}")

    @property
    def template(self) -> str:
        """A record submit.lua writes, copies to each task of a bulk call and deletes."""
        return self._k("t-template")

    def result(self, task_id: str) -> str:
        return self._k(f"r:{task_id}")

    def index(self, queue: str, state: str) -> str:
        return self._k(f"ix:{queue}:{state}")

    def stats(self, queue: str) -> str:
        return self._k(f"stats:{queue}")

    def dlq(self, queue: str) -> str:
        return self._k(f"dlq:{queue}")

    def limits(self, queue: str) -> str:
        return self._k(f"lim:{queue}")

    def limit_held(self, queue: str) -> str:
        return self._k(f"lim:{queue}:held")

    def limit_wait(self, queue: str) -> str:
        return self._k(f"lim:{queue}:wait")

    def limit_rate(self, queue: str) -> str:
        return self._k(f"lim:{queue}:rate")

    def idempotency(self, queue: str, key: str) -> str:
        return self._k(f"idem:{queue}:{key}")

    def operation(self, key: str) -> str:
        return self._k(f"op:{key}")

    def throughput(self, minute: int) -> str:
        return self._k(f"tp:{minute}")

    @property
    def schedule(self) -> str:
        return self._k("schedule")

    @property
    def legacy_running(self) -> str:
        """The shard's lease index of earlier versions, now each queue's RUNNING index.

        Nothing writes it any more; the reaper's retention sweep deletes what an upgrade left.
        """
        return self._k("running")

    @property
    def events(self) -> str:
        return self._k("events")

    @property
    def dlq_index(self) -> str:
        return self._k("dlqix")

    @property
    def queues(self) -> str:
        return self._k("queues")

    @property
    def paused(self) -> str:
        return self._k("paused")

    @property
    def durable_mark(self) -> str:
        return self._k("durable")

    @property
    def workers(self) -> str:
        return self._k("workers")

    def worker(self, worker_id: str) -> str:
        return self._k(f"w:{worker_id}")

    def take(self, worker_id: str) -> str:
        """A worker's last take.lua request token in this shard (a resend is told by it)."""
        return self._k(f"take:{worker_id}")

    def leader(self, role: str) -> str:
        return self._k(f"leader:{role}")

    def process(self, role: str, process_id: str) -> str:
        return self._k(f"proc:{role}:{process_id}")

    def processes(self, role: str) -> str:
        return self._k(f"procs:{role}")

    def periodic(self, name: str) -> str:
        return self._k(f"periodic:{name}")

    def periodic_log(self, name: str) -> str:
        return self._k(f"periodic:{name}:log")

    def bulk_job(self, job_id: str) -> str:
        return self._k(f"bulkjob:{job_id}")

    def workflow(self, workflow_id: str) -> str:
        return self._k(f"wf:{workflow_id}")

    def workflow_ready(self, workflow_id: str) -> str:
        return self._k(f"wf:{workflow_id}:ready")

    @property
    def workflows_due(self) -> str:
        return self._k("wfdue")
