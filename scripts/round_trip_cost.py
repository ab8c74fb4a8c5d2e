"""Measure what one bare round trip costs Redis and the client, sleeping or polling for the reply.

Starts a private redis-server on a free 127.0.0.1 port (never 6379) and sends N LPUSH
commands one at a time over a raw socket, in alternating rounds: the client either blocks in
recv() until the reply arrives (what every Redis client does) or polls with non-blocking
recv() until it does. Prints per command the wall time, the client's CPU and Redis' user and
system CPU (INFO cpu). On a machine where waking a sleeping thread is dear (a VM), Redis'
system time per command is mostly the wake-up of the client its reply goes to: the floor
under any queue's Redis CPU per round trip on loopback, which a client on another host does
not cost it. Medians over the rounds.

    .venv/bin/python scripts/round_trip_cost.py [-n 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from redis_cost import private_redis

COMMAND = b"*3\r\n$5\r\nLPUSH\r\n$1\r\nq\r\n$3\r\nabc\r\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5000, help="commands per round")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    with private_redis("round-trip") as (client, _):
        port = int(client.connection_pool.connection_kwargs["port"])
        link = socket.create_connection(("127.0.0.1", port))
        link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def blocking() -> None:
            link.sendall(COMMAND)
            link.recv(64)

        def polling() -> None:
            link.sendall(COMMAND)
            while True:
                try:
                    link.recv(64, socket.MSG_DONTWAIT)
                    return
                except BlockingIOError:
                    pass

        def redis_cpu() -> tuple[float, float]:
            info = client.info("cpu")
            return float(info["used_cpu_user"]), float(info["used_cpu_sys"])

        def measure(each: Callable[[], None]) -> tuple[float, float, float, float]:
            for _ in range(200):
                each()
            (user0, sys0), wall0, cpu0 = redis_cpu(), time.perf_counter(), time.process_time()
            for _ in range(opts.n):
                each()
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            user1, sys1 = redis_cpu()
            return tuple(v * 1e6 / opts.n for v in (wall, cpu, user1 - user0, sys1 - sys0))  # type: ignore[return-value]

        figures: dict[str, list[tuple[float, float, float, float]]] = {
            "blocking": [],
            "polling": [],
        }
        for _ in range(opts.rounds):
            for name, each in (("blocking", blocking), ("polling", polling)):
                figures[name].append(measure(each))
        link.close()
    for name, runs in figures.items():
        wall, cpu, user, system = (statistics.median(r[i] for r in runs) for i in range(4))
        print(
            f"{name:<8} wall {wall:6.1f} us  client CPU {cpu:6.1f} us  "
            f"Redis CPU user {user:5.1f} + sys {system:5.1f} us per command"
        )


if __name__ == "__main__":
    main()
