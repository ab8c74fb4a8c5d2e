"""Subprocesses in their own process groups, killed by recorded pid, plus memory sampling."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from typing import IO

import psutil

_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def spawn(args: list[str], env: dict[str, str], stdout: IO[bytes] | None = None,
          cwd: str | None = None, lifetime: float = 0.0) -> subprocess.Popen[bytes]:
    """Start `args` as the leader of a new session / process group and remember its pid.

    With `lifetime`, coreutils `timeout` wraps the command so it dies by itself even if this
    harness is killed before it can clean up.
    """
    timeout_bin = shutil.which("timeout")
    if lifetime > 0 and timeout_bin:
        args = [timeout_bin, "-k", "5", f"{lifetime:.0f}", *args]
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=stdout or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    _LIVE[proc.pid] = proc
    return proc


def _tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that are still alive."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_group(proc: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """SIGTERM the group of `proc`, SIGKILL it (and stray descendants) after `grace` seconds."""
    descendants = _tree(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in descendants:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.pid != os.getpid():
                p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    _LIVE.pop(proc.pid, None)


def kill_all() -> None:
    """Last-resort cleanup: kill every process group this harness started."""
    for proc in list(_LIVE.values()):
        kill_group(proc, grace=1.0)


def memory_mb(pids: list[int]) -> tuple[float, float]:
    """Summed (RSS, PSS) in MiB of the given processes and all their descendants."""
    seen: set[int] = set()
    rss = pss = 0.0
    for pid in pids:
        for p in _tree(pid):
            if p.pid in seen:
                continue
            seen.add(p.pid)
            with contextlib.suppress(psutil.Error):  # short-lived children may vanish any time
                if p.name() == "timeout":
                    continue
                info = p.memory_full_info()
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20


def wait_alive(procs: list[subprocess.Popen[bytes]]) -> bool:
    """True if none of `procs` has exited."""
    return all(p.poll() is None for p in procs)


def sleep_until(deadline: float) -> None:
    """time.sleep until the monotonic `deadline` (no-op if already past)."""
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
