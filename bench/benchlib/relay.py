"""A TCP relay on 127.0.0.1 that holds each client-to-server chunk for a fixed delay.

Every round trip through it grows by about the delay, as if Redis sat a network hop away
(this kernel has no netem). Server-to-client bytes pass at once. Run as a subprocess:

    python benchlib/relay.py --target 127.0.0.1:PORT --delay-ms 1 --port-file FILE

It writes the port it listens on to FILE and serves until it is killed (the harness starts
it through procs.spawn: own process group, killed by pid, bounded lifetime).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time

from benchlib import procs


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   delay: float) -> None:
    """Copy reader to writer, each chunk no earlier than `delay` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def feed() -> None:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait((0.0, b""))

    feeder = asyncio.create_task(feed())
    try:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            if queue.empty():
                await writer.drain()
    finally:
        feeder.cancel()
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(target_host: str, target_port: int, delay: float, port_file: str) -> None:
    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            c_writer.close()
            return
        up = asyncio.create_task(_forward(c_reader, s_writer, delay))
        down = asyncio.create_task(_forward(s_reader, c_writer, 0.0))
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for w in (c_writer, s_writer):
            with contextlib.suppress(Exception):
                w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(port))
    os.replace(tmp, port_file)  # the harness reads a whole port or nothing
    async with server:
        await server.serve_forever()


class Relay:
    """Starts the relay subprocess in front of a server; stop() kills it by its pid."""

    def __init__(self, run_dir: str, target_port: int, delay_ms: float,
                 lifetime: float) -> None:
        self.run_dir, self.target_port, self.delay_ms = run_dir, target_port, delay_ms
        self.lifetime = lifetime
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL through the relay, database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Launch the relay and wait (bounded) for the port it listens on."""
        port_file = os.path.join(self.run_dir, "relay.port")
        with contextlib.suppress(FileNotFoundError):
            os.remove(port_file)
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHONPATH=os.path.dirname(here))
        log = open(os.path.join(self.run_dir, "relay.log"), "ab")  # noqa: SIM115
        self.proc = procs.spawn(
            [sys.executable, os.path.abspath(__file__), "--target",
             f"127.0.0.1:{self.target_port}", "--delay-ms", str(self.delay_ms),
             "--port-file", port_file], env=env, stdout=log, lifetime=self.lifetime)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as fh:
                    self.port = int(fh.read())
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the delay relay did not start (see relay.log in the run dir)")

    def stop(self) -> None:
        """Kill the relay we started (by pid)."""
        if self.proc is not None:
            procs.kill_group(self.proc, grace=1.0)
            self.proc = None


def main() -> None:
    """Parse the arguments and serve until killed."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", required=True, help="host:port of the server")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    if host != "127.0.0.1":
        raise SystemExit("the relay only forwards to 127.0.0.1")
    asyncio.run(_serve(host, int(port), args.delay_ms / 1000.0, args.port_file))


if __name__ == "__main__":
    main()
