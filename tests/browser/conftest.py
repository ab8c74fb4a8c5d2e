"""Real-browser fixtures: Debian's chromium driven by Playwright, the site served by Daphne.

Locally the browser tests skip when /usr/bin/chromium is missing; with CI=true they fail
instead, so CI can never pass without running them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dtq.embedded import free_port
from tests.conftest import ROOT, Env

CHROMIUM = Path(os.environ.get("DTQ_CHROMIUM", "/usr/bin/chromium"))  # Debian's package
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_IMG = ROOT / "docs" / "img"
ADMIN_USER = "admin"
ADMIN_PASSWORD = "browser-test-password"


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests must run)")
    pytest.skip(f"{reason}: install it with `apt-get install chromium` to run the browser tests")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """The Playwright driver (the browser itself is Debian's, never downloaded).

    Module-scoped: its event loop must be gone before other tests run their own.
    """
    if not CHROMIUM.exists():
        _missing(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Any) -> Iterator[Any]:
    """One headless Chromium for the whole run."""
    chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


def _django(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database with a superuser, made once and copied for each test."""
    path = tmp_path_factory.mktemp("browser-db") / "template.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DTQ_TEST_DB": str(path),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD,
    }
    _django(env, "migrate", "--verbosity", "0")
    _django(env, "createsuperuser", "--noinput", "--username", ADMIN_USER, "--email", "a@b.example")
    return path


class Site:
    """The demo ASGI application under Daphne, on 127.0.0.1, with the test's settings."""

    def __init__(self, env: Env, db: Path) -> None:
        self.env = env
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Site:
        """Start Daphne and wait until it answers."""
        command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "dtq_project.asgi:application"],
            cwd=ROOT,
            env=self.env.env(DJANGO_SETTINGS_MODULE="tests.settings", DTQ_TEST_DB=str(self.db)),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=None if os.environ.get("DTQ_TEST_VERBOSE") else subprocess.DEVNULL,
        )
        self.env.procs.append(self.proc)  # the dtq_env fixture ends it whatever happens
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/admin/login/", timeout=1):
                    return self
            except OSError:
                assert self.proc.poll() is None, "daphne exited"
                time.sleep(0.1)
        raise AssertionError("daphne did not answer within 30s")

    def stop(self) -> None:
        """Stop Daphne (the page's websocket drops)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)


@pytest.fixture
def site(dtq_env: Env, migrated_db: Path, tmp_path: Path) -> Site:
    """The site, serving this test's key prefix and its own copy of the database."""
    db = tmp_path / "site.sqlite3"
    shutil.copy(migrated_db, db)
    return Site(dtq_env, db).start()


@pytest.fixture
def page(browser: Any, site: Site, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A signed-in admin page; a screenshot of its last state is kept under test-artifacts/."""
    context = browser.new_context(base_url=site.url, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    tab.goto("/admin/login/")
    tab.fill("#id_username", ADMIN_USER)
    tab.fill("#id_password", ADMIN_PASSWORD)
    tab.click("input[type=submit]")
    tab.wait_for_url("**/admin/")
    yield tab
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"), full_page=True)
    context.close()


def screenshot(tab: Any, name: str) -> None:
    """Save a screenshot under test-artifacts/ (and docs/img/ with DTQ_DOCS_SCREENSHOTS=1)."""
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if os.environ.get("DTQ_DOCS_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(DOCS_IMG / f"{name}.png"), full_page=True)
