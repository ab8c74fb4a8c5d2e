"""The benchmark's delay relay (bench/benchlib/relay.py): bytes pass intact, round trips grow."""

from __future__ import annotations

import statistics
import sys
import time
from urllib.parse import urlparse

import pytest
import redis

from tests.conftest import ROOT

sys.path.append(str(ROOT / "bench"))  # the benchmark harness is not a package of dtq
from benchlib.relay import Relay


def _median_ping_ms(client: redis.Redis, n: int = 30) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.ping()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


@pytest.fixture
def relay(dtq_env, tmp_path):
    port = urlparse(dtq_env.url).port or 6379
    relay = Relay(str(tmp_path), port, delay_ms=5.0, lifetime=60)
    relay.start()
    yield relay
    relay.stop()


def test_relay_passes_commands_and_replies_intact(relay, dtq_env):
    client = redis.Redis(host="127.0.0.1", port=relay.port, socket_timeout=5)
    key = f"{dtq_env.prefix}:relay-probe"
    value = bytes(range(256)) * 1000  # larger than one read: several chunks each way
    client.set(key, value, ex=60)
    assert client.get(key) == value
    pipe = client.pipeline(transaction=False)
    for _ in range(200):
        pipe.incr(key + ":n")
    assert pipe.execute() == list(range(1, 201))
    client.delete(key, key + ":n")
    client.close()


def test_each_round_trip_grows_by_about_the_delay(relay, dtq_env):
    direct = redis.Redis.from_url(dtq_env.url, socket_timeout=5)
    relayed = redis.Redis(host="127.0.0.1", port=relay.port, socket_timeout=5)
    added = _median_ping_ms(relayed) - _median_ping_ms(direct)
    assert 5.0 <= added < 20.0, added
    direct.close()
    relayed.close()


def test_stop_ends_the_relay_process(relay):
    proc = relay.proc
    relay.stop()
    assert proc is not None and proc.poll() is not None
