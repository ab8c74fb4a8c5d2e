"""Run Django's own tests/tasks/ against DtqBackend with real workers; print Django's report.

    python -m tests.django_suite [--django-tests DIR] [test labels...]

Without --django-tests, the sdist of the installed Django version is fetched with pip (it
holds Django's tests). The suite is copied to a temporary directory as the package `tasks`
(its tests check that module path); the copy's backend paths are swapped, Django's test
backends for DtqBackend (tests/django_suite/backends.py); nothing of Django's is kept in
this repository. Exit status 0 means exactly the tests in EXPECTED did not pass: the
deliberate differences that docs/django-tasks.md explains. Any other failure, or a test of
EXPECTED that passes now, is reported and exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

import django
import redis

ROOT = Path(__file__).resolve().parents[2]
OURS = "tests.django_suite.backends"
EXPECTED = {  # Django 6.1's tests that do not pass on DtqBackend (docs/django-tasks.md)
    # ImmediateBackend cannot read results or defer; DtqBackend can.
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_get_result",
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_refresh_result",
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_pass_run_after",
    # A worker has no caller to hand KeyboardInterrupt to: it fails the attempt.
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_throws_keyboard_interrupt",
    # They edit DummyBackend's in-memory copy of a result; DtqBackend's is in Redis.
    "tasks.test_dummy_backend.DummyBackendTestCase.test_refresh_result",
    "tasks.test_dummy_backend.DummyBackendTestCase.test_refresh_result_async",
    # exception_class never imports a path read from Redis: a stand-in, not ImportError.
    "tasks.test_tasks.TaskTestCase.test_task_error_unknown_module",
}
NOT_PASSED = re.compile(r"^(?:FAIL|ERROR): \w+ \(([\w.]+)\)", re.MULTILINE)
SWAPS = {  # Django's test backend -> ours, in settings strings and in imports
    "immediate.ImmediateBackend": "WorkerRunBackend",
    "dummy.DummyBackend": "QueuedBackend",
}


def fetch_suite(into: Path) -> Path:
    """Download the installed Django version's sdist and return its tests/tasks directory."""
    version = django.get_version()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"django=={version}",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-d",
            str(into),
        ],
        check=True,
    )
    [sdist] = into.glob("*.tar.gz")
    prefix = f"{sdist.name.removesuffix('.tar.gz')}/tests/tasks/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(into, members=members, filter="data")
    return into / prefix


def copy_swapped(suite: Path, into: Path) -> None:
    """Copy Django's suite as the package `tasks`, with DtqBackend in place of its backends."""
    target = into / "tasks"
    shutil.copytree(suite, target)
    for path in target.glob("test_*.py"):
        text = path.read_text()
        for theirs, ours in SWAPS.items():
            module, name = theirs.split(".")
            text = text.replace(f'"django.tasks.backends.{theirs}"', f'"{OURS}.{ours}"')
            text = re.sub(
                rf"^from django\.tasks\.backends\.{module} import {name}$",
                f"from {OURS} import {ours} as {name}",
                text,
                flags=re.MULTILINE,
            )
        path.write_text(text)


def main() -> int:
    """Run the suite and return Django's test runner exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--django-tests", type=Path, help="a Django checkout's tests/tasks")
    parser.add_argument("labels", nargs="*", default=["tasks"])
    args = parser.parse_args()
    prefix = f"djsuite{uuid.uuid4().hex[:8]}"
    url = os.environ.get("DTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    with tempfile.TemporaryDirectory(prefix="dtq-django-suite-") as tmp:
        work = Path(tmp)
        copy_swapped(args.django_tests or fetch_suite(work / "sdist"), work)
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="tests.django_suite.settings",
            DTQ_KEY_PREFIX=prefix,
            DTQ_REDIS_URL=url,
            PYTHONPATH=os.pathsep.join([str(work), str(ROOT)]),
        )
        command = [sys.executable, "-m", "django", "test", "-v", "2", *args.labels]
        try:
            run = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        finally:
            client = redis.Redis.from_url(url)
            for key in client.scan_iter(f"{prefix}:*", count=1000):  # only this run's keys
                client.delete(key)
    sys.stdout.write(run.stdout + run.stderr)
    return compare(set(NOT_PASSED.findall(run.stderr)), args.labels)


def compare(not_passed: set[str], labels: list[str]) -> int:
    """Print how the run differs from EXPECTED; return 0 when it does not."""
    expected = {t for t in EXPECTED if any(t == x or t.startswith(f"{x}.") for x in labels)}
    for name in sorted(not_passed - expected):
        print(f"UNEXPECTED FAILURE: {name}")
    for name in sorted(expected - not_passed):
        print(f"NOW PASSES (remove it from EXPECTED and the docs): {name}")
    print(f"{len(not_passed & expected)} expected differences, as documented")
    return 0 if not_passed == expected else 1


if __name__ == "__main__":
    sys.exit(main())
