"""Redis passwords never reach output: commands' errors, process logs, checks, the demo."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq.engine.connection import RedactFilter, mask_url, redact
from tests.conftest import ROOT

PASSWORD = "hunter2-not-for-output"
DOWN = f"redis://admin:{PASSWORD}@127.0.0.1:1/0"  # nothing listens on port 1


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (f"redis://:{PASSWORD}@h:6379/0", "redis://:***@h:6379/0"),
        (f"rediss://alice:{PASSWORD}@h/1", "rediss://alice:***@h/1"),
        (
            f"unix:///run/redis.sock?db=2&password={PASSWORD}",
            "unix:///run/redis.sock?db=2&password=***",
        ),
        ("redis://h:6379/0", "redis://h:6379/0"),
        (f"redis://:{PASSWORD}@[::1", "redis://:***@[::1"),  # unparseable: still masked
    ],
)
def test_mask_url_hides_every_form_of_password(url, masked):
    assert mask_url(url) == masked


def test_redact_masks_urls_and_the_configured_password_in_any_text(settings):
    settings.DTQ = {**settings.DTQ, "REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0"}
    text = f"failed on redis://u:{PASSWORD}@host/0 after AUTH {PASSWORD}"
    assert redact(text) == "failed on redis://u:***@host/0 after AUTH ***"


def test_the_log_filter_masks_formatted_records():
    record = logging.LogRecord("dtq", logging.WARNING, __file__, 1, "error=%s", (DOWN,), None)
    assert RedactFilter().filter(record)
    assert PASSWORD not in record.getMessage() and "127.0.0.1:1" in record.getMessage()


@pytest.mark.slow
def test_dtq_status_errors_mask_the_password(settings):
    settings.DTQ = {**settings.DTQ, "REDIS_URL": DOWN}
    with pytest.raises(CommandError) as caught:
        call_command("dtq_status")
    assert PASSWORD not in str(caught.value) and "admin:***@127.0.0.1:1" in str(caught.value)


def test_checks_mask_a_url_that_is_not_a_redis_url(settings):
    from dtq.checks import check_settings

    settings.DTQ = {**settings.DTQ, "REDIS_URL": f"http://u:{PASSWORD}@h/"}
    messages = " ".join(e.msg for e in check_settings())
    assert "must be a Redis URL" in messages and PASSWORD not in messages


@pytest.mark.slow
@pytest.mark.parametrize("command", ["dtq_worker", "dtq_scheduler", "dtq_reaper", "dtq_status"])
def test_process_errors_mask_the_password(dtq_env, command):
    env = dtq_env.env()
    env["DTQ_REDIS_URL"] = DOWN
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "cannot r" in output, output
    assert PASSWORD not in output and "admin:***@127.0.0.1:1" in output


@pytest.mark.parametrize(
    "reporter_filter", [None, "dtq.reporting.RedisSafeExceptionReporterFilter"]
)
def test_django_error_reports_mask_the_redis_password(settings, rf, reporter_filter):
    import sys

    from django.views.debug import ExceptionReporter, get_default_exception_reporter_filter

    settings.DTQ = {**settings.DTQ, "REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0"}
    settings.CACHES = {"r": {"BACKEND": "x", "LOCATION": f"redis://:{PASSWORD}@cache:6379/1"}}
    if reporter_filter:
        settings.DEFAULT_EXCEPTION_REPORTER_FILTER = reporter_filter
    get_default_exception_reporter_filter.cache_clear()  # Django caches it per process
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        report = ExceptionReporter(rf.get("/"), *sys.exc_info()).get_traceback_text()
    finally:
        get_default_exception_reporter_filter.cache_clear()
    assert "boom" in report
    # Django's own filter leaks it (why dtq ships one); the demo project sets dtq's.
    assert (PASSWORD in report) is (reporter_filter is None)


def test_the_commands_mask_passwords_in_the_projects_log_handlers_too():
    import io

    from dtq.management.commands._common import setup_logging

    dtq_logger, root = logging.getLogger("dtq"), logging.getLogger()
    saved = (list(dtq_logger.handlers), dtq_logger.level)
    out = io.StringIO()
    project_handler = logging.StreamHandler(out)  # as a project's LOGGING would configure
    root.addHandler(project_handler)
    try:
        setup_logging(1)
        logging.getLogger("dtq.worker").warning("redis error: cannot reach %s", DOWN)
    finally:
        root.removeHandler(project_handler)
        dtq_logger.handlers[:], dtq_logger.level = saved
    assert "cannot reach redis://admin:***@127.0.0.1:1/0" in out.getvalue()
    assert PASSWORD not in out.getvalue()
