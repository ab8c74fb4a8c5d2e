"""Run inside a fresh virtualenv: import every dtq module; print which ones need an extra.

Prints one JSON document: {"imported": [...], "missing_extra": {module: message}, "failed":
{module: error}}.
"""

from __future__ import annotations

import importlib
import json
from importlib.util import find_spec
from pathlib import Path

import django
from django.conf import settings

APPS = ["rest_framework", "rest_framework.authtoken", "drf_spectacular", "channels"]
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "dtq",
        *(app for app in APPS if find_spec(app.split(".")[0])),
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    SECRET_KEY="packaging-check",
    USE_TZ=True,
)
django.setup()

import dtq  # noqa: E402
from dtq.extras import MissingExtra  # noqa: E402

root = Path(dtq.__file__).parent
modules = sorted(
    ".".join(("dtq", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
    for p in root.rglob("*.py")
)
if find_spec("pytest") is None:
    modules.remove("dtq.pytest_plugin")  # pytest loads it (entry point pytest11), never dtq
report: dict[str, object] = {"imported": [], "missing_extra": {}, "failed": {}}
for name in modules:
    try:
        importlib.import_module(name)
    except MissingExtra as exc:
        report["missing_extra"][name] = str(exc)  # type: ignore[index]
    except Exception as exc:
        report["failed"][name] = f"{type(exc).__name__}: {exc}"  # type: ignore[index]
    else:
        report["imported"].append(name)  # type: ignore[attr-defined]
print(json.dumps(report))
