"""A thread calling scripts over several pools (one per Cluster primary, as a submitter spread
over shards does) keeps one connection per pool instead of leaking one per switch."""

from __future__ import annotations

import redis

from dtq.engine.direct import _own_connection, call_script
from tests.script_calls import raw_script

SCRIPT = "return redis.call('INCR', KEYS[1])"


def test_alternating_pools_reuse_their_connections(dtq_env):
    kwargs = dtq_env.client.connection_pool.connection_kwargs
    pools = [redis.ConnectionPool(max_connections=1, **kwargs) for _ in range(2)]
    clients = [redis.Redis(connection_pool=pool) for pool in pools]
    script, key = raw_script(SCRIPT), f"{dtq_env.prefix}:pools"
    try:
        # Each pool allows one connection: a second one made for a pool raises at once.
        for n in range(1, 11):
            assert call_script(clients[n % 2], script, [key], []) == n
        assert [_own_connection(p) for p in pools] == [_own_connection(p) for p in pools]
    finally:
        for pool in pools:
            pool.disconnect()
