"""arq: asyncio worker, default poll_delay and keep_result, max_jobs = BENCH_CONCURRENCY."""

from __future__ import annotations

from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from workloads import CONCURRENCY, REDIS_URL, ahandle

SETTINGS = RedisSettings.from_dsn(REDIS_URL)


async def noop(ctx: dict[str, Any], seq: int, enqueued_at: float, kind: str) -> None:
    """Benchmark job."""
    await ahandle(seq, enqueued_at, kind)


class WorkerSettings:
    """Settings object for the `arq` command."""

    functions = [noop]
    redis_settings = SETTINGS
    max_jobs = CONCURRENCY


class Producer:
    """Enqueues with ArqRedis.enqueue_job."""

    pool: ArqRedis

    async def start(self) -> None:
        """Open the pool."""
        self.pool = await create_pool(SETTINGS)

    async def enqueue(self, seq: int, ts: float, kind: str) -> None:
        """Send one job."""
        await self.pool.enqueue_job("noop", seq, ts, kind)

    async def close(self) -> None:
        """Close the pool."""
        await self.pool.aclose()


ASYNC = True


def make_producer() -> Producer:
    """Producer for produce.py."""
    return Producer()
