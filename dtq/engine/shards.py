"""Shards: which shard a new task goes to, every shard's keys, and the client that reaches one.

A shard is one hash tag (``{n}``) of the key layout: on a Redis Cluster all of a shard's keys
live in one slot on one primary. Process-wide keys (workers, leaders, periodic tasks, audit
marks) live in HOME.
"""

from __future__ import annotations

import secrets
import zlib

import redis
import redis.asyncio as aioredis

from dtq.conf import dtq_settings
from dtq.engine import connection, ids
from dtq.engine.keys import Keys

HOME = 0  # the shard of process-wide keys


def count() -> int:
    """Return how many shards tasks are spread over."""
    return int(dtq_settings.SHARDS)


def numbers() -> range:
    """Return every shard number."""
    return range(count())


def keys(shard: int, prefix: str | None = None) -> Keys:
    """Return the key names of one shard."""
    return Keys(prefix or dtq_settings.KEY_PREFIX, shard)


def every(prefix: str | None = None) -> list[Keys]:
    """Return the key names of every shard, shard 0 first."""
    return [keys(shard, prefix) for shard in numbers()]


def of_task(task_id: str, prefix: str | None = None) -> Keys:
    """Return the key names of the shard a task (or workflow) id belongs to."""
    return keys(ids.shard_of(task_id), prefix)


def for_new_task(
    queue: str, idempotency_key: str | None = None, limit_group: str | None = None
) -> int:
    """Return the shard for a new task: any, unless it has a limit group or idempotency key.

    Tasks sharing a flow-control limit (one task name and concurrency key value) go to one
    shard, so the limit, kept in that shard, holds fleet-wide. An idempotency key is
    remembered in one shard only, so every submit with the same (queue, key) must go to the
    same shard for a duplicate to be found (a limit group is the same for every such submit
    of one call, so it decides first).
    """
    shards = count()
    if shards <= 1:
        return 0
    if limit_group:
        return zlib.crc32(limit_group.encode()) % shards
    if idempotency_key:
        return zlib.crc32(f"{queue}\0{idempotency_key}".encode()) % shards
    return secrets.randbelow(shards)


def client(shard: int) -> redis.Redis:
    """Return the synchronous client that reaches the primary holding this shard's keys."""
    return connection.client_for_key(keys(shard).tag)


def new_async_client(shard: int) -> aioredis.Redis:
    """Return a new asyncio client for this shard's primary (the caller closes it)."""
    return connection.new_async_client(keys(shard).tag)
