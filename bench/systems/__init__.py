"""Parent-side adapters, one module per system, all with the interface of systems.base.System."""

from __future__ import annotations

from systems.arq import Arq
from systems.base import Ctx, System
from systems.celery import CeleryPrefork, CeleryThreads
from systems.dramatiq import Dramatiq
from systems.dtq import Dtq
from systems.huey import Huey
from systems.rq import Rq
from systems.saq import Saq
from systems.taskiq import Taskiq
from systems.tasks_redis import TasksRedis
from systems.vtasks import Vtasks

ALL: dict[str, type[System]] = {
    cls.name: cls
    for cls in (Dtq, Vtasks, TasksRedis, CeleryPrefork, CeleryThreads, Rq, Dramatiq, Huey, Arq,
                Taskiq, Saq)
}

__all__ = ["ALL", "Ctx", "System"]
