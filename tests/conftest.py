"""Fixtures: a real Redis server, a private key prefix per test, real worker processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from dtq.embedded import RedisServer
from dtq.engine import events, protocol, shards
from dtq.engine.keys import BANDS, GROUP, Keys

ROOT = Path(__file__).resolve().parent.parent
_embedded: RedisServer | None = None
_cluster: Any = None  # the local Redis Cluster of a DTQ_TEST_CLUSTER=1 run


def pytest_configure(config: pytest.Config) -> None:
    """Use DTQ_REDIS_URL when given, else start an embedded Redis for the whole run.

    DTQ_TEST_CLUSTER=1 runs the tests on a local Redis Cluster instead (make test-cluster):
    DTQ_REDIS_URL names shard 0's primary, so a test's own client finds its keys there.
    """
    global _embedded, _cluster
    if os.environ.get("DTQ_TEST_CLUSTER") == "1" and _cluster is None:
        from tests.topology import SUITE_CLUSTER_PORT, LocalCluster, require_redis_server

        require_redis_server()
        _cluster = LocalCluster(SUITE_CLUSTER_PORT).start()
        os.environ["DTQ_REDIS_URL"] = _cluster.owner("{0}").url
        os.environ["DTQ_REDIS_CLUSTER"] = "1"
    if not os.environ.get("DTQ_REDIS_URL"):
        _embedded = RedisServer().start()
        os.environ["DTQ_REDIS_URL"] = _embedded.url


def pytest_unconfigure(config: pytest.Config) -> None:
    if _embedded is not None:
        _embedded.stop()
    if _cluster is not None:
        _cluster.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the Cluster/Sentinel tests (their own servers, minutes) to make test-scaleout.

    Under DTQ_TEST_SHARDS > 1 (make test-shards), skip the tests of a guarantee that holds per
    shard only (strict priority, a queue's depth): docs/scaling.md says why.
    """
    sharded = int(os.environ.get("DTQ_TEST_SHARDS", "1")) > 1
    skip_shards = pytest.mark.skip(reason="per shard with SHARDS > 1 (docs/scaling.md)")
    scaleout = os.environ.get("DTQ_TEST_SCALEOUT") == "1"
    skip = pytest.mark.skip(reason="starts its own Redis servers: run by make test-scaleout")
    for item in items:
        if item.get_closest_marker("scaleout") and not scaleout:
            item.add_marker(skip)
        if item.get_closest_marker("one_shard") and sharded:
            item.add_marker(skip_shards)


def pytest_report_header(config: pytest.Config) -> str:
    url = os.environ.get("DTQ_REDIS_URL", "")
    version = redis.Redis.from_url(url).info("server")["redis_version"]
    where = " (embedded)" if _embedded else " (a local Redis Cluster)" if _cluster else ""
    return f"dtq: Redis {version} at {url}{where}"


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll condition until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s: {condition}")


class Env:
    """One test's private dtq namespace, its witness file and the processes it started."""

    def __init__(self, url: str, prefix: str, tmp: Path, settings: Any) -> None:
        self.settings = settings
        self.overrides: dict[str, Any] = {}
        self.url = url
        self.prefix = prefix
        self.witness_path = tmp / "witness.jsonl"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.client = redis.Redis.from_url(url, decode_responses=True)

    def configure(self, **values: Any) -> None:
        """Change DTQ settings here and in every process started afterwards."""
        self.overrides.update(values)
        self.settings.DTQ = {**self.settings.DTQ, **values}

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            DTQ_REDIS_URL=self.url,
            DTQ_KEY_PREFIX=self.prefix,
            DTQ_WITNESS=str(self.witness_path),
            PYTHONPATH=str(ROOT),
            DTQ_TEST_OVERRIDES=json.dumps(self.overrides),
        )
        env.pop("DTQ_FAILPOINTS", None)
        env.update(extra)
        return env

    def spawn(
        self, command: str, *args: str, failpoints: str = "", **extra: str
    ) -> subprocess.Popen[bytes]:
        """Start `manage.py <command> <args>` as a real process in its own process group."""
        env = self.env(**extra)
        if failpoints:
            env["DTQ_FAILPOINTS"] = failpoints
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", command, *args],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL if not os.environ.get("DTQ_TEST_VERBOSE") else None,
        )
        self.procs.append(proc)
        return proc

    def worker(self, *args: str, failpoints: str = "", **extra: str) -> subprocess.Popen[bytes]:
        """Start a dtq_worker process on the tests queue."""
        return self.spawn("dtq_worker", "--queue", "tests", *args, failpoints=failpoints, **extra)

    def witnessed(self, task: str | None = None) -> list[dict[str, Any]]:
        """Return the handler executions recorded so far (optionally of one task name)."""
        if not self.witness_path.exists():
            return []
        # A worker may be writing a line right now: a reader can see part of it, so only lines
        # that reached their newline count (the rest shows up on the next read).
        lines = self.witness_path.read_text().split("\n")[:-1]
        rows = [json.loads(line) for line in lines if line]
        return [r for r in rows if task is None or r["task"] == task]

    @property
    def keys(self) -> Keys:
        """The keys of shards.HOME (workers, processes; every task's when SHARDS is 1)."""
        return Keys(self.prefix)

    def keys_of(self, task_id: str) -> Keys:
        """The keys of the shard a task id names."""
        return shards.of_task(task_id, self.prefix)

    def every_shard(self) -> list[tuple[Keys, redis.Redis]]:
        """Each shard's keys and a client that reaches them (on a cluster: its primary)."""
        return [(keys, self.client_of(keys)) for keys in shards.every(self.prefix)]

    def client_of(self, keys: Keys) -> redis.Redis:
        """The client reaching a shard's keys: ours, unless the shard is on another primary."""
        if keys.shard == shards.HOME or _cluster is None:
            return self.client
        return shards.client(keys.shard)

    def total(self, count: Callable[[redis.Redis, Keys], Any]) -> int:
        """Sum count(client, keys) over every shard (a queue's stream length, say)."""
        return sum(int(count(client, keys) or 0) for keys, client in self.every_shard())

    def stats(self, queue: str = "tests") -> dict[str, int]:
        """Return the counters of a queue (absorbed, stale, reclaimed, succeeded...), all shards."""
        out: dict[str, int] = {}
        for keys, client in self.every_shard():
            for name, value in client.hgetall(keys.stats(queue)).items():
                out[name] = out.get(name, 0) + int(value)
        return protocol.fold_counters(out)

    def events(self, kind: str) -> list[dict[str, Any]]:
        """Return the lifecycle events of one type from every shard's events stream, by time."""
        rows = [
            row
            for keys, client in self.every_shard()
            for row in events.decode(client.xrange(keys.events))
        ]
        rows.sort(key=lambda row: tuple(int(part) for part in row["id"].split("-")))
        return [row for row in rows if row["type"] == kind]

    def leftovers(self, queue: str = "tests") -> dict[str, int]:
        """Return what is still in flight: unacknowledged entries, leases, schedule members."""
        pending = running = schedule = 0
        for keys, client in self.every_shard():
            for band in BANDS:
                stream = keys.stream(queue, band)
                if client.exists(stream) and client.xinfo_groups(stream):
                    pending += int(client.xpending(stream, GROUP)["pending"])
            running += client.zcard(keys.index(queue, "RUNNING"))  # by lease deadline
            schedule += client.zcard(keys.schedule)
        return {"pending": pending, "running": running, "schedule": schedule}

    def use_server(self, url: str) -> None:
        """Point settings, later processes and the test's client at another Redis server."""
        self.url = url
        self.configure(REDIS_URL=url)
        self.client.close()
        self.client = redis.Redis.from_url(url, decode_responses=True)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def cleanup(self) -> None:
        """Delete only this test's keys (never FLUSHDB a server we share)."""
        self.stop_all()
        for client in {id(c): c for _, c in self.every_shard()}.values():  # each primary once
            pipe = client.pipeline(transaction=False)
            for key in client.scan_iter(f"{self.prefix}:*", count=1000):
                pipe.delete(key)  # one key a call: a cluster node's keys may span slots
            pipe.execute()
        self.client.close()


@pytest.fixture
def dtq_env(settings: Any, tmp_path: Path) -> Iterator[Env]:
    """A private key prefix on the real Redis, with settings pointing at it."""
    url = os.environ["DTQ_REDIS_URL"]
    prefix = "t" + uuid.uuid4().hex[:12]
    # REDIS_CLUSTER too: pytest-django may load tests/settings.py before pytest_configure
    # names the local cluster (make test-cluster), and then the settings say False.
    cluster = os.environ.get("DTQ_REDIS_CLUSTER") == "1"
    settings.DTQ = {
        **settings.DTQ,
        "REDIS_URL": url,
        "KEY_PREFIX": prefix,
        "REDIS_CLUSTER": cluster,
    }
    env = Env(url, prefix, tmp_path, settings)
    yield env
    env.cleanup()


@pytest.fixture
def private_redis(dtq_env: Env) -> Iterator[RedisServer]:
    """A Redis server of this test's own (AOF on, free to restart), with dtq_env using it."""
    server = RedisServer(appendonly=True).start()
    shared = dtq_env.url
    dtq_env.use_server(server.url)
    yield server
    dtq_env.stop_all()
    dtq_env.use_server(shared)  # dtq_env's cleanup then finds nothing of ours on the shared one
    server.stop(signal.SIGKILL)
    shutil.rmtree(server.data_dir, ignore_errors=True)
