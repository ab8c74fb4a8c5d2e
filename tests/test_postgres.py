"""The audit tests again on PostgreSQL, which most production sites use (a pytest subprocess).

The server comes from DTQ_POSTGRES_SERVER (postgresql://user[:password]@host:port/dbname), else
the local default; `.ci/run` starts one when the machine has none. The subprocess gets it as
DTQ_TEST_POSTGRES, which switches tests/settings.py: only that run uses PostgreSQL. Without a
server the test skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("DTQ_POSTGRES_SERVER", "postgresql://postgres@127.0.0.1:5432/postgres")
FILES = ["tests/test_audit.py", "tests/test_cursors.py", "tests/test_api_system.py"]


def _problem(url: str) -> str | None:
    """Return why PostgreSQL at url cannot be used, or None when it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -r requirements.txt)"
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"cannot connect: {str(exc).strip().splitlines()[0]}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_audit_tests_pass_on_postgresql():
    problem = _problem(SERVER)
    if problem:
        message = f"no PostgreSQL for the audit tests ({problem}); set DTQ_POSTGRES_SERVER"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI must run them: .ci/run starts a server)")
        pytest.skip(message)
    env = {**os.environ, "DTQ_TEST_POSTGRES": SERVER}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout
