"""The package's metadata: one version, valid classifiers that match the CI matrix, a
CHANGELOG entry for the version, and the optional extras of issue #19."""

import tomllib

from trove_classifiers import classifiers as KNOWN

import dtq
from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_version_is_pyprojects():
    assert dtq.__version__ == PROJECT["version"]


def test_classifiers_are_known_and_name_the_tested_versions():
    found = set(PROJECT["classifiers"])
    assert found <= KNOWN, sorted(found - KNOWN)
    for django in ("5.2", "6.0", "6.1"):  # make test-django52, test-django60, make test
        assert f"Framework :: Django :: {django}" in found
    for python in ("3.12", "3.13"):  # make test, make test-py313
        assert f"Programming Language :: Python :: {python}" in found


def test_the_changelog_has_the_version():
    assert f"## {PROJECT['version']}" in (ROOT / "CHANGELOG.md").read_text()


def test_extras_and_the_pytest_plugin_are_declared():
    extras = PROJECT["optional-dependencies"]
    assert {"django52", "tracing"} <= set(extras)
    assert any(req.startswith("django-tasks") for req in extras["django52"])
    assert {req.split(">")[0] for req in extras["tracing"]} == {
        "opentelemetry-api",
        "opentelemetry-sdk",
    }
    assert PROJECT["entry-points"]["pytest11"] == {"dtq": "dtq.pytest_plugin"}


def test_package_data_covers_every_data_file_of_the_source_tree():
    """Lua scripts, templates and static files: what the wheel must carry besides code."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["dtq"]
    package = ROOT / "dtq"
    data = {
        path.relative_to(package)
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts
    }
    covered = {path for path in data if any(path.match(pattern) for pattern in patterns)}
    assert data == covered, sorted(map(str, data - covered))
    assert {p.parts[0] for p in covered} >= {"engine", "templates", "static"}
