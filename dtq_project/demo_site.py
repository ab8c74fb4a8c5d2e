"""The demo's admin site: Daphne on 127.0.0.1, an admin user, and a steady flow of tasks."""

from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
ADMIN_USER = "admin"
STATUS_EVERY = 15.0  # seconds between two status lines


def choose_port() -> int:
    """Return DTQ_DEMO_PORT (default 8000), or a free port when that one is taken."""
    wanted = int(os.environ.get("DTQ_DEMO_PORT", "8000"))
    with socket.socket() as sock:
        if sock.connect_ex((HOST, wanted)) != 0:
            return wanted
    from dtq.embedded import free_port

    return free_port()


def serve(port: int) -> subprocess.Popen[bytes]:
    """Start Daphne serving the demo's ASGI application (admin and live events)."""
    command = [sys.executable, "-m", "daphne", "-b", HOST, "-p", str(port)]
    command += ["--access-log", os.devnull]  # one line per request would drown the status
    return subprocess.Popen([*command, "dtq_project.asgi:application"], cwd=ROOT)


def wait_until_up(port: int, timeout: float = 30.0) -> bool:
    """Return True once the site answers, False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/admin/login/", timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def ensure_admin() -> str:
    """Create (or reset) the demo's superuser with a new random password; return it."""
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(username=ADMIN_USER)
    user.is_staff = user.is_superuser = user.is_active = True
    user.set_password(password)
    user.save()
    return password


def submit_some(rng: random.Random) -> None:
    """Submit about a second's worth of demo tasks: mostly fine, a few retrying or failing."""
    from dtq_project.demo import tasks

    tasks.add.enqueue(rng.randint(1, 99), rng.randint(1, 99))
    tasks.roll_dice.enqueue()
    tasks.nap.using(queue_name="reports").enqueue(round(rng.uniform(0.5, 4.0), 1))
    if rng.random() < 0.5:
        tasks.greet.enqueue(rng.choice(["Ada", "Grace", "Linus", "Barbara"]))
    if rng.random() < 0.15:
        tasks.flaky.enqueue(1)
    if rng.random() < 0.06:
        tasks.poison.enqueue()  # ends in the dead-letter queue: try Replay in the admin


def status_line() -> str:
    """Return one line with every queue's counts."""
    from dtq.engine import read_side

    parts = [
        f"{q['name']}: {q['queued']} queued, {q['running']} running, {q['dlq']} in DLQ"
        for q in read_side.overview()
    ]
    return time.strftime("%H:%M:%S ") + " | ".join(parts)


def keep_flowing() -> None:
    """Submit demo tasks every second and print a status line now and then, until Ctrl-C."""
    rng = random.Random()
    last_status = 0.0
    while True:
        submit_some(rng)
        if time.monotonic() - last_status >= STATUS_EVERY:
            print(status_line(), flush=True)
            last_status = time.monotonic()
        time.sleep(1.0)
