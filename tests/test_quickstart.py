"""The quick start of docs/django-tasks.md as a fresh project: on Django 5.2 with the
django-tasks backport, or on 6.x with django.tasks, a task runs end to end in real processes.

The matrix (make test-matrix) runs it on every Django dtq supports.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import redis

from dtq.compat import HAS_DJANGO_TASKS, TASKS_MODULE
from tests.conftest import ROOT, Env

# The docs' settings: only `django_tasks` in INSTALLED_APPS differs between 5.2 and 6.x.
SETTINGS = """
SECRET_KEY = "quickstart"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", {backport}"dtq", "shop"
]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}}
TASKS = {{"default": {{"BACKEND": "dtq.backends.DtqBackend", "QUEUES": [], "OPTIONS": {{}}}}}}
DTQ = {{"REDIS_URL": {url!r}, "KEY_PREFIX": {prefix!r}}}
"""

# The docs' tasks module; `from django_tasks import task` on 5.2, `from django.tasks ...` on 6.x.
TASKS = """
from {module} import task


@task(priority=10, queue_name="emails")
def send(user_id: int) -> str:
    return f"sent to {{user_id}}"
"""

ENQUEUE = "from shop.tasks import send; print(send.enqueue(1).id)"
READ = """
from dtq.compat import default_task_backend
import json, sys
result = default_task_backend.get_result(sys.argv[1])
print(json.dumps([result.status, result.return_value, type(result.task).__name__]))
"""


def _project(tmp_path: Path, env: Env) -> Path:
    project = tmp_path / "quickstart"
    (project / "shop").mkdir(parents=True)
    backport = "" if HAS_DJANGO_TASKS else '"django_tasks", '
    settings = SETTINGS.format(backport=backport, url=env.url, prefix=env.prefix)
    (project / "settings.py").write_text(settings)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "tasks.py").write_text(TASKS.format(module=TASKS_MODULE))
    return project


def _run(project: Path, *argv: str) -> str:
    env = {"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": f"{project}:{ROOT}", "PATH": ""}
    done = subprocess.run(
        [sys.executable, *argv], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _django(code: str) -> list[str]:
    return ["-c", f"import django; django.setup()\n{textwrap.dedent(code)}"]


def test_the_quick_start_runs_a_task_end_to_end(dtq_env, tmp_path):
    project = _project(tmp_path, dtq_env)
    task_id = _run(project, *_django(ENQUEUE)).strip()
    _run(project, "-m", "django", "dtq_worker", "--queue", "emails", "--burst")
    status, value, kind = json.loads(_run(project, *_django(READ), task_id))
    assert (status, value, kind) == ("SUCCESSFUL", "sent to 1", "DtqTask")
    keys = redis.Redis.from_url(dtq_env.url).keys(f"{dtq_env.prefix}:*")
    assert keys  # the task really went through this test's Redis namespace
