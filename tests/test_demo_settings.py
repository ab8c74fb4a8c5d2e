"""The demo project's settings are safe outside the demo: no DEBUG, no shared secret key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOW = (
    "import json; from django.conf import settings; "
    "print(json.dumps([settings.DEBUG, settings.SECRET_KEY]))"
)


def demo_settings(var: Path, **env: str) -> tuple[bool, str]:
    """Load dtq_project.settings in a fresh interpreter; return (DEBUG, SECRET_KEY)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    clean |= {"DJANGO_SETTINGS_MODULE": "dtq_project.settings", "DTQ_VAR_DIR": str(var), **env}
    out = subprocess.run(
        [sys.executable, "-c", SHOW], env=clean, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    debug, key = json.loads(out.stdout)
    return debug, key


def test_debug_is_off_unless_asked_for(tmp_path):
    assert demo_settings(tmp_path)[0] is False
    assert demo_settings(tmp_path, DJANGO_DEBUG="1")[0] is True


def test_the_secret_key_is_generated_once_per_checkout(tmp_path):
    _, first = demo_settings(tmp_path / "a")
    _, again = demo_settings(tmp_path / "a")
    _, other = demo_settings(tmp_path / "b")
    assert first == again != other
    assert len(first) >= 50 and "demo" not in first
    assert (tmp_path / "a" / "secret_key").stat().st_mode & 0o077 == 0


def test_the_secret_key_comes_from_the_environment_first(tmp_path):
    assert demo_settings(tmp_path, DJANGO_SECRET_KEY="k" * 60)[1] == "k" * 60
    assert not (tmp_path / "secret_key").exists()
