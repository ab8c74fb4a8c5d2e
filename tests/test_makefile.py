"""`make test` sets up what its tests need by itself: Debian's chromium for the browser tests."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_test_sets_up_chromium_before_running_pytest():
    plan = make("-n", "test").stdout  # -n: print the recipes, run nothing
    assert "install -y -qq chromium" in plan
    assert plan.index("chromium") < plan.index("-m pytest")


def test_a_missing_chromium_is_installed_with_apt_when_root_else_explained():
    done = make("chromium", "CHROMIUM=/nonexistent/chromium", "APT_GET=echo would-run")
    assert done.returncode == 0, done.stderr
    if os.geteuid() == 0:
        assert "would-run install -y -qq chromium" in done.stdout
    else:
        assert "sudo apt-get install chromium" in done.stdout


def test_a_present_chromium_needs_nothing(tmp_path):
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    done = make("chromium", f"CHROMIUM={browser}", "APT_GET=false")
    assert done.returncode == 0 and done.stdout == ""
