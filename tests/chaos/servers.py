"""The Redis side of a chaos run, per topology: one private server with AOF (restarted by the
redis faults), or a local Cluster or Sentinel set (tests/topology.py) one of whose primaries
the failover fault SIGKILLs and later brings back as a replica."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from dtq.embedded import RedisServer
from tests.chaos import evidence
from tests.chaos.config import ChaosConfig
from tests.topology import SERVICE, LocalCluster, LocalSentinel, Server, free_block, wait_until

SEED_TAG = "{0}"  # dtq is configured with a node that does not serve HOME's slot
REJOIN_TIMEOUT = 30.0  # seconds a restarted primary gets to be a linked replica again


class SingleServer:
    """One private redis-server with AOF; the redis_term / redis_kill faults restart it."""

    def __init__(self, cfg: ChaosConfig, run_dir: Path, binary: str | None) -> None:
        self.server = RedisServer(
            binary=binary,
            appendonly=True,
            appendfsync=cfg.appendfsync,
            data_dir=str(run_dir / "redis"),
        )

    @property
    def url(self) -> str:
        return self.server.url

    def settings(self) -> dict[str, Any]:
        """Return the DTQ connection settings that reach this server."""
        return {"REDIS_URL": self.url}

    def start(self, log: evidence.JsonLog) -> None:
        self.server.start()
        log.write("redis_up", port=self.server.port, binary=self.server.binary)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.server.stop(sig)


class ReplicatedServers:
    """A local 3-primary Cluster or a primary + replicas + 3 Sentinels, two replicas per
    primary: after a failover the new primary still has a replica to confirm durable submits."""

    def __init__(self, cfg: ChaosConfig) -> None:
        self.topology = cfg.topology
        self.servers: LocalCluster | LocalSentinel
        if cfg.topology == "cluster":
            self.servers = LocalCluster(free_block(), replicas=cfg.replicas)
        else:
            self.servers = LocalSentinel(free_block(), replicas=cfg.replicas)

    def primary(self, shard: int = 0) -> Server:
        """Return the server that is the primary of a shard's keys now."""
        if isinstance(self.servers, LocalCluster):
            return self.servers.owner(f"{{{shard}}}")
        return self.servers.primary()

    def _seed(self) -> Server:
        """Return the node dtq is configured with: one that must redirect, on a cluster."""
        if isinstance(self.servers, LocalCluster):
            return self.servers.not_owner(SEED_TAG)
        return self.servers.primary()

    @property
    def url(self) -> str:
        return self._seed().url

    def settings(self) -> dict[str, Any]:
        """Return the DTQ connection settings: the seed node plus Cluster or Sentinel."""
        if isinstance(self.servers, LocalCluster):
            return {"REDIS_URL": self.url, "REDIS_CLUSTER": True}
        return {
            "REDIS_URL": self.url,
            "REDIS_SENTINELS": self.servers.addresses,
            "REDIS_SENTINEL_SERVICE": SERVICE,
        }

    def start(self, log: evidence.JsonLog) -> None:
        self.servers.start()
        ports = [s.port for s in self._data()]
        log.write("servers_up", topology=self.topology, ports=ports, primary=self.primary().port)

    def _data(self) -> list[Server]:
        if isinstance(self.servers, LocalCluster):
            return self.servers.servers
        return self.servers.data

    def fail_over(
        self, log: evidence.JsonLog, rejoin_after: float, shard: int, shards: int
    ) -> None:
        """SIGKILL the primary of a shard, wait for its replica's promotion, then after
        rejoin_after restart the old primary (empty: no AOF on replicated servers) as a replica.
        The kill is logged with every shard of the run that primary held."""
        old = self.primary(shard)
        held = [n for n in range(shards) if self.primary(n) is old]
        log.write("primary_kill", port=old.port, shards=held)
        started = time.monotonic()
        if isinstance(self.servers, LocalCluster):
            new = self.servers.fail_over(f"{{{shard}}}")
        else:
            new = self.servers.fail_over()
        log.write("promoted", port=new.port, seconds=round(time.monotonic() - started, 3))
        time.sleep(rejoin_after)
        old.start()
        if isinstance(self.servers, LocalSentinel):
            # The Sentinels would make it a replica on a later look at it (every 10 s, longer on
            # a loaded machine: CI once waited past REJOIN_TIMEOUT); say it now, as an operator
            # bringing a server back does, naming the primary the Sentinels name now.
            new = self.servers.primary()
            wait_until(lambda: old.client().replicaof("127.0.0.1", new.port), "REPLICAOF")
        wait_until(
            lambda: self._linked(old, new), "the old primary back as a replica", REJOIN_TIMEOUT
        )
        log.write("replica_back", port=old.port, primary=new.port)

    def _linked(self, replica: Server, primary: Server) -> bool:
        info = replica.client().info("replication")
        return bool(
            info["role"] == "slave"
            and int(info["master_port"]) == primary.port
            and info["master_link_status"] == "up"
        )

    def stop(self) -> None:
        self.servers.stop()


Servers = SingleServer | ReplicatedServers


def for_config(cfg: ChaosConfig, run_dir: Path, binary: str | None) -> Servers:
    """Return the Redis side the config's topology asks for (not started)."""
    if cfg.topology == "single":
        return SingleServer(cfg, run_dir, binary)
    return ReplicatedServers(cfg)
