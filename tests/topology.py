"""Local Redis topologies for tests: a Redis Cluster and a Sentinel-managed primary + replica.

Every server is a real redis-server on a loopback port of 17000-17099 (the block given to
these tests), in a temporary directory of its own, started as a child process and stopped by
its pid, never by name. Start-up waits on conditions with a deadline (CLUSTER INFO says ok,
replicas are linked, Sentinels see each other), so a broken set-up fails fast and clearly.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
START_TIMEOUT = 30.0  # seconds a topology gets to come up


CLUSTER_PORT = 17000  # tests/test_cluster.py's cluster: 17000-17005
SUITE_CLUSTER_PORT = 17090  # the main suite on a cluster (DTQ_TEST_CLUSTER=1): 17090-17095
BLOCKS = range(17010, 17090, 10)  # one block of ten ports per Sentinel set
# How long a Sentinel waits for a reply before it calls a server down. At 1 s, a Sentinel that
# had just switched to a promoted replica, on a loaded two-core machine, once called that new
# primary down too and failed over again while it still took writes: a second failover no test
# asked for (the chaos run then lost the writes of the deposed primary). 3 s keeps promotions
# quick (about 4 s after a kill) without that.
DOWN_AFTER_MS = 3000


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_block() -> int:
    """Return the first port of a block of ten free ports for a Sentinel set."""
    for first in BLOCKS:
        if all(_free(p) for p in range(first, first + 10)):
            return first
    raise AssertionError("no free block of ports in 17010-17089")


def require_redis_server() -> None:
    """Skip (fail under CI=true) when redis-server or redis-cli is not installed."""
    if REDIS_SERVER and REDIS_CLI:
        return
    message = "redis-server and redis-cli are needed to start a local Cluster or Sentinel"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = START_TIMEOUT) -> Any:
    """Poll condition (errors count as 'not yet') until it is truthy, or raise naming what."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (redis.RedisError, OSError) as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s (last error: {last})")


class Server:
    """One redis-server process on 127.0.0.1:port."""

    def __init__(self, port: int, root: Path, *args: str, sentinel: bool = False) -> None:
        self.port = port
        self.dir = root / str(port)
        self.args = args
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5, **options)

    def start(self) -> Server:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "redis.conf"
        if not conf.exists():  # a restart keeps what the server (or Sentinel) rewrote
            conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n")
        command = [str(REDIS_SERVER), str(conf), *self.args]
        if self.sentinel:
            command.append("--sentinel")
        log = open(self.dir / "log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: self.client().ping(), f"redis-server on port {self.port}")
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown save), by its pid."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def pause(self, paused: bool) -> None:
        """SIGSTOP (or SIGCONT) the server: a replica that falls behind, by its pid."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def stop(self) -> None:
        if self.alive():
            self.pause(False)  # a stopped process would not take SIGKILL's exit until resumed
        self.kill()


def _base_args() -> list[str]:
    return ["--save", "", "--appendonly", "no", "--protected-mode", "no"]


class LocalCluster:
    """A Redis Cluster of `primaries` primaries, each with `replicas` replicas."""

    def __init__(self, first_port: int, primaries: int = 3, replicas: int = 1) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"dtq-cluster-{first_port}-"))
        count = primaries * (1 + replicas)
        args = [
            *_base_args(),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            # A lost primary is failed over about a second after it stops answering.
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
        ]
        self.servers = [Server(first_port + i, self.root, *args) for i in range(count)]
        self.replicas = replicas

    def start(self) -> LocalCluster:
        try:
            for server in self.servers:
                server.start()
            addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
            create = ["--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas)]
            subprocess.run(
                [str(REDIS_CLI), *create, "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=START_TIMEOUT,
            )
            wait_until(self._ready, "a healthy cluster")
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        for server in self.servers:
            if not server.alive():
                continue
            client = server.client()
            try:
                info = client.cluster("INFO")  # redis-py parses it into a dict
                if info.get("cluster_state") != "ok":
                    return False
                replication = client.info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            finally:
                client.close()
        return True

    def owner(self, key: str) -> Server:
        """Return the server that is now the primary for key's slot."""
        seed = next(s for s in self.servers if s.alive())
        slot = int(seed.client().execute_command("CLUSTER KEYSLOT", key))
        for first, last, primary, *_ in seed.client().execute_command("CLUSTER SLOTS"):
            if first <= slot <= last:
                return next(s for s in self.servers if s.port == int(primary[1]))
        raise AssertionError(f"no primary serves slot {slot}")

    def not_owner(self, key: str) -> Server:
        """Return a live primary that does not serve key's slot (a seed that must redirect)."""
        owner = self.owner(key)
        for server in self.servers:
            alive = server is not owner and server.alive()
            if alive and server.client().info("replication")["role"] == "master":
                return server
        raise AssertionError("no other primary")

    def replicas_of(self, primary: Server) -> list[Server]:
        """Return the live replicas of a primary."""
        return [
            s
            for s in self.servers
            if s.alive() and s.client().info("replication").get("master_port") == primary.port
        ]

    def fail_over(self, key: str, lag: float = 0.0) -> Server:
        """SIGKILL the primary of key's slot; return the replica promoted in its place.

        lag > 0 first stops its replicas for that many seconds, so they miss what the primary
        acknowledged meanwhile (a replica that fell behind), and resumes them after the kill.
        """
        owner = self.owner(key)
        behind = self.replicas_of(owner) if lag else []
        _lag(behind, lag)
        owner.kill()
        for replica in behind:
            replica.pause(False)
        new = wait_until(lambda: self._promoted(key, owner), "a promoted replica", 20.0)
        wait_until(self._ready, "the cluster healthy again", 20.0)
        return new

    def _promoted(self, key: str, old: Server) -> Server | None:
        new = self.owner(key)
        return new if new is not old and new.alive() else None

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _lag(replicas: list[Server], seconds: float) -> None:
    for replica in replicas:
        replica.pause(True)
    time.sleep(seconds)


SERVICE = "dtqprimary"


class LocalSentinel:
    """A primary, `replicas` replicas and three Sentinels watching them (quorum 2)."""

    def __init__(self, first_port: int, replicas: int = 1, appendonly: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"dtq-sentinel-{first_port}-"))
        args = _base_args()
        if appendonly:
            args[3] = "yes"
        self.data = [Server(first_port + i, self.root, *args) for i in range(1 + replicas)]
        ports = range(first_port + 1 + replicas, first_port + 4 + replicas)
        self.sentinels = [Server(p, self.root, sentinel=True) for p in ports]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The Sentinels, as DTQ['REDIS_SENTINELS'] takes them."""
        return [("127.0.0.1", s.port) for s in self.sentinels]

    def start(self) -> LocalSentinel:
        try:
            primary, *replicas = self.data
            primary.start()
            for replica in replicas:
                replica.args = (*replica.args, "--replicaof", "127.0.0.1", str(primary.port))
                replica.start()
            wait_until(lambda: self._linked(primary), "replicas linked to the primary")
            for sentinel in self.sentinels:
                sentinel.dir.mkdir(parents=True, exist_ok=True)
                (sentinel.dir / "redis.conf").write_text(
                    f"port {sentinel.port}\nbind 127.0.0.1\ndir {sentinel.dir}\n"
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary.port} 2\n"
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                    f"sentinel failover-timeout {SERVICE} 5000\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n"
                )
                sentinel.start()
            wait_until(self._watching, "three Sentinels that see each other and the replicas")
        except BaseException:
            self.stop()
            raise
        return self

    def _linked(self, primary: Server) -> bool:
        info = primary.client().info("replication")
        return int(info.get("connected_slaves", 0)) == len(self.data) - 1 and all(
            info[f"slave{i}"]["state"] == "online" for i in range(len(self.data) - 1)
        )

    def _watching(self) -> bool:
        for sentinel in self.sentinels:
            fields = sentinel.client().sentinel_master(SERVICE)  # parsed into a dict
            if int(fields["num-other-sentinels"]) < 2:
                return False
            if int(fields["num-slaves"]) < len(self.data) - 1:
                return False
        return True

    def primary(self) -> Server:
        """Return the server the Sentinels name as primary now."""
        reply = self.sentinels[0].client().sentinel_get_master_addr_by_name(SERVICE)
        port = int(reply[1])
        return next(s for s in self.data if s.port == port)

    def fail_over(self, lag: float = 0.0) -> Server:
        """SIGKILL the primary; return the replica the Sentinels promote (lag: see above)."""
        old = self.primary()
        behind = [s for s in self.data if s is not old and s.alive()] if lag else []
        _lag(behind, lag)
        old.kill()
        for replica in behind:
            replica.pause(False)
        return wait_until(lambda: self._promoted(old), "a Sentinel failover", 30.0)

    def _promoted(self, old: Server) -> Server | None:
        new = self.primary()
        if new is old or not new.alive():
            return None
        return new if new.client().info("replication")["role"] == "master" else None

    def stop(self) -> None:
        for server in [*self.sentinels, *self.data]:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)
