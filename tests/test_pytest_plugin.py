"""dtq's pytest plugin (dtq/pytest_plugin.py) as a user's project sees it, run with pytester:
found through its entry point, fixtures that run tasks in-process and assert on enqueued
ones, and keys private to each test and deleted after it.
"""

import os
from importlib.metadata import entry_points

import redis

from dtq.compat import HAS_DJANGO_TASKS, TASKS_MODULE
from tests.conftest import ROOT

pytest_plugins = ["pytester"]

SETTINGS = """
import os
SECRET_KEY = "plugin"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", {backport}"dtq", "shop"
]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}}
TASKS = {{"default": {{"BACKEND": "dtq.backends.DtqBackend", "QUEUES": [], "OPTIONS": {{}}}}}}
DTQ = {{"REDIS_URL": os.environ["DTQ_REDIS_URL"]}}
"""

TASKS = """
import dtq
from {module} import task


@dtq.task(queue_name="emails")
def send(user_id: int) -> str:
    return f"sent {{user_id}}"


@dtq.task(queue_name="emails")
def count_users() -> int:
    from django.contrib.auth.models import User

    return User.objects.count()


@task(queue_name="alerts")
def notify(name: str, loud: bool = False) -> str:
    return name.upper() if loud else name
"""

USER_TESTS = """
import os

import pytest

from dtq.engine.connection import get_client
from shop import tasks


def _seen(prefix):
    with open(os.environ["PREFIXES"], "a") as f:
        f.write(prefix + "\\n")


def test_run_and_assert(dtq_queue):
    _seen(dtq_queue.prefix)
    sent = tasks.send.enqueue(1)
    tasks.notify.enqueue("ada", loud=True)
    dtq_queue.assert_enqueued(tasks.send, 1)
    dtq_queue.assert_enqueued(tasks.notify, "ada", loud=True)
    assert [e.name for e in dtq_queue.enqueued(queue="emails")] == ["shop.tasks.send"]
    assert get_client().keys(dtq_queue.prefix + ":*")
    assert dtq_queue.run("emails") == [sent.id]
    sent.refresh()
    assert (sent.state, sent.return_value) == ("SUCCEEDED", "sent 1")
    [ran] = dtq_queue.run()
    assert tasks.notify.get_result(ran).return_value == "ADA"
    dtq_queue.assert_nothing_enqueued()


def test_keys_are_private_to_each_test(dtq_queue):
    _seen(dtq_queue.prefix)
    dtq_queue.assert_nothing_enqueued()  # the other test's tasks are not seen here
    tasks.send.enqueue(2)
    with pytest.raises(AssertionError, match=r"found 0; enqueued runs of it: (.*2.*)"):
        dtq_queue.assert_enqueued(tasks.send, 3)


def test_a_failing_assertion_fails_the_test(dtq_queue):
    dtq_queue.assert_enqueued(tasks.send, 1)


@pytest.mark.django_db
def test_tasks_see_the_tests_transaction(dtq_queue):
    from django.contrib.auth.models import User

    User.objects.create(username="ada")  # not committed: only this connection sees it
    result = tasks.count_users.enqueue()
    dtq_queue.run()
    result.refresh()
    assert result.return_value == 1


def test_a_plain_task_after_a_database_test(dtq_queue):
    result = tasks.send.enqueue(3)  # no database here: the run must not touch it either
    dtq_queue.run()
    result.refresh()
    assert result.return_value == "sent 3"
"""


def test_the_plugin_is_registered_by_its_entry_point():
    [plugin] = [e for e in entry_points(group="pytest11") if e.name == "dtq"]
    assert plugin.value == "dtq.pytest_plugin"


def test_fixtures_run_tasks_assert_and_isolate_keys(pytester, monkeypatch, tmp_path):
    backport = "" if HAS_DJANGO_TASKS else '"django_tasks", '
    pytester.makepyfile(settings=SETTINGS.format(backport=backport))
    pytester.mkpydir("shop")
    (pytester.path / "shop" / "tasks.py").write_text(TASKS.format(module=TASKS_MODULE))
    pytester.makepyfile(test_shop=USER_TESTS)
    prefixes = tmp_path / "prefixes"
    monkeypatch.setenv("PREFIXES", str(prefixes))
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{ROOT}")
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    result = pytester.runpytest_subprocess("--ds=settings", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    expected = "*expected one enqueued shop.tasks.send(*[[]1[]], **{}), found 0*"
    result.stdout.fnmatch_lines([expected])
    seen = prefixes.read_text().split()
    assert len(set(seen)) == 2  # the two tests that wrote down their prefix
    client = redis.Redis.from_url(os.environ["DTQ_REDIS_URL"])
    assert [client.keys(f"{prefix}:*") for prefix in seen] == [[], []]  # deleted after
