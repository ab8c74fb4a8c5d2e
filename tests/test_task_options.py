"""TaskOptions: every option's rule, and one message for a bad value from every entry point."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import dtq
from dtq.compat import InvalidTask
from dtq.engine import read_side
from dtq.engine.audit import Actor
from dtq.engine.errors import InvalidTaskError, SubmitError
from dtq.engine.manual import run_by_hand
from dtq.engine.submit import Submission, submit, validate
from dtq.options import MAX_SECONDS, InvalidOption, TaskOptions, delay_of
from tests.test_api_support import RECORD, api, assert_error, post  # noqa: F401
from tests.testapp import django_tasks as dj
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)  # run-by-hand writes an audit row
NAIVE = datetime(2030, 1, 1, 12, 0)

# (option, a bad value): each breaks exactly that option's rule.
BAD = [
    ("queue_name", "has space"),
    ("queue_name", 7),
    ("priority", 101),
    ("priority", -101),
    ("priority", 1.5),
    ("priority", True),
    ("max_attempts", 0),
    ("max_attempts", 1001),
    ("max_attempts", 2.0),
    ("retry_base", 0),
    ("retry_cap", -1),
    ("retry_jitter", 1.5),
    ("retry_jitter", "0.5"),
    ("timeout", 0),
    ("timeout", "30"),
    ("timeout", MAX_SECONDS + 1),
    ("ttl", -5),
    ("run_after", NAIVE),
    ("run_after", "tomorrow"),
    ("idempotency_key", "has space"),
    ("idempotency_key", "k" * 201),
    ("retry_on", (int,)),
    ("rate_limit", "10/x"),
    ("rate_limit", "0/s"),
    ("rate_limit", 10),
    ("rate_burst", 5),  # a burst needs a rate
    ("max_concurrency", 0),
    ("max_concurrency", True),
    ("max_concurrency", 100_001),
    ("concurrency_key", "no such"),
    ("concurrency_key", "customer"),  # a key needs a limit to partition
]


def message_of(option: str, value: Any) -> str:
    """Return the one message TaskOptions gives for a bad value."""
    with pytest.raises(InvalidOption) as caught:
        TaskOptions(**{option: value})
    assert caught.value.option == option
    return str(caught.value)


@pytest.mark.parametrize(("option", "value"), BAD)
def test_every_bad_value_names_its_option_and_the_value(option: str, value: Any) -> None:
    message = message_of(option, value)
    assert message.startswith(option) or "queue name" in message
    assert repr(value)[:20] in message or value is NAIVE


@pytest.mark.parametrize(("option", "value"), BAD)
def test_decorator_and_using_give_the_same_message(option: str, value: Any) -> None:
    expected = message_of(option, value)
    if option in inspect.signature(dtq.task).parameters:
        with pytest.raises(InvalidTaskError) as caught:
            dtq.task(tasks.record.func, name="options.probe", **{option: value})
        assert str(caught.value) == expected
    if option != "retry_on":  # fixed where a task is defined
        with pytest.raises(InvalidTaskError) as caught:
            tasks.record.using(**{option: value})
        assert str(caught.value) == expected


@pytest.mark.parametrize(("option", "value"), BAD)
def test_the_django_tasks_backend_gives_the_same_message(option: str, value: Any) -> None:
    expected = message_of(option, value)
    if option == "run_after" and not isinstance(value, datetime):
        pytest.skip("django's own dataclass takes only datetimes")
    if option == "retry_on":
        with pytest.raises(InvalidTask) as caught:
            from dataclasses import replace

            replace(dj.add, retry_on=value)
    else:
        with pytest.raises(InvalidTask) as caught:
            dj.add.using(**{option: value})
    assert str(caught.value) == expected


def test_a_bad_burst_with_a_rate_names_the_burst() -> None:
    with pytest.raises(InvalidOption) as caught:
        TaskOptions(rate_limit="10/s", rate_burst=0)
    assert caught.value.option == "rate_burst"
    assert str(caught.value) == "rate_burst: burst must be an int in 1..1000000, got 0"


def test_using_changes_the_limits_on_both_task_kinds() -> None:
    limited = tasks.record.using(rate_limit="5/s", rate_burst=2, max_concurrency=3)
    limits = limited.limits
    assert limits is not None and limits.max_concurrency == 3
    assert str(limits.rate) == "5/s (burst 2)"
    assert tasks.record.limits is None  # using() made a copy
    assert dj.add.using(max_concurrency=2).max_concurrency == 2


def test_a_bad_value_is_refused_before_anything_is_written(dtq_env: Any) -> None:
    with pytest.raises(InvalidTaskError):
        tasks.record.using(priority=500).enqueue()
    assert read_side.queue_names() == []


# ----- the API and run-by-hand give the same messages ---------------------------------------

API_BAD = [
    ("priority", 101),
    ("priority", -101),
    ("max_attempts", 0),
    ("max_attempts", 1001),
    ("timeout", 0),
    ("ttl", MAX_SECONDS + 1),
]


@pytest.mark.parametrize(("option", "value"), API_BAD)
def test_the_api_gives_the_same_message(api: Any, option: str, value: Any) -> None:  # noqa: F811
    client = api.client("view", "submit")
    response = post(client, "/api/tasks/", {"task": RECORD, option: value})
    error = assert_error(response, 400, "invalid")
    assert error["details"]["fields"][option] == [message_of(option, value)]


def test_the_api_refuses_a_naive_run_after_with_the_same_message(api: Any) -> None:  # noqa: F811
    client = api.client("view", "submit")
    response = post(client, "/api/tasks/", {"task": RECORD, "run_after": NAIVE.isoformat()})
    error = assert_error(response, 400, "invalid")
    assert error["details"]["fields"]["run_after"] == [message_of("run_after", NAIVE)]
    assert read_side.queue_names() == []


def test_the_api_takes_an_aware_run_after(api: Any) -> None:  # noqa: F811
    client = api.client("view", "submit")
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    response = post(client, "/api/tasks/", {"task": RECORD, "run_after": later})
    assert response.status_code == 202, response.content
    assert response.json()["state"] == "PENDING"


def test_the_api_limits_delay_and_run_after_by_max_delay(api: Any, dtq_env: Any) -> None:  # noqa: F811
    dtq_env.configure(MAX_DELAY=60)
    client = api.client("view", "submit")
    response = post(client, "/api/tasks/", {"task": RECORD, "delay": 61})
    fields = assert_error(response, 400, "invalid")["details"]["fields"]
    assert fields["delay"] == ["delay must be within 0..60 seconds from now, got 61.000"]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    response = post(client, "/api/tasks/", {"task": RECORD, "run_after": later})
    fields = assert_error(response, 400, "invalid")["details"]["fields"]
    assert fields["run_after"][0].startswith("run_after must be within 0..60 seconds from now")


@pytest.mark.parametrize(("option", "value"), [("priority", 101), ("priority", 2.5)])
def test_run_by_hand_gives_the_same_message(dtq_env: Any, option: str, value: Any) -> None:
    with pytest.raises(InvalidTaskError) as caught:
        run_by_hand(RECORD, actor=Actor.command(), **{option: value})
    assert str(caught.value) == message_of(option, value)


def test_run_by_hand_and_the_engine_share_the_delay_rule(dtq_env: Any) -> None:
    dtq_env.configure(MAX_DELAY=60)
    with pytest.raises(InvalidTaskError) as by_hand:
        run_by_hand(RECORD, actor=Actor.command(), delay=61)
    with pytest.raises(SubmitError) as engine:
        validate(Submission(name=RECORD, queue="tests", delay=61))
    assert str(by_hand.value) == str(engine.value)


# ----- what a submission gets ----------------------------------------------------------------


def test_the_engine_refuses_what_taskoptions_refuses_with_its_message(dtq_env: Any) -> None:
    cases = {"priority": 101, "max_attempts": 0, "timeout": 0, "ttl": -1, "idempotency_key": "a b"}
    for option, value in cases.items():
        with pytest.raises(InvalidOption) as caught:
            validate(Submission(name=RECORD, queue="tests", **{option: value}))
        assert str(caught.value) == message_of(option, value)
    with pytest.raises(InvalidOption, match="retry_jitter"):
        validate(Submission(name=RECORD, queue="tests", retry={"jitter": 3}))


def test_a_submission_takes_the_settings_defaults_for_unset_options(dtq_env: Any) -> None:
    dtq_env.configure(DEFAULT_MAX_ATTEMPTS=5, DEFAULT_TIMEOUT=30, RETRY_BASE=2, RETRY_CAP=9)
    sub = Submission.of("x", TaskOptions(), (), {})
    assert (sub.queue, sub.max_attempts, sub.timeout, sub.delay) == ("default", 5, 30.0, 0.0)
    assert sub.retry == {"base": 2.0, "cap": 9.0, "jitter": 0.5}
    own = TaskOptions(queue_name="q", max_attempts=2, timeout=1, retry_jitter=0, priority=7)
    sub = Submission.of("x", own, (), {})
    assert (sub.queue, sub.max_attempts, sub.timeout, sub.priority) == ("q", 2, 1, 7)
    assert sub.retry["jitter"] == 0


def test_both_task_kinds_build_the_same_submission(dtq_env: Any) -> None:
    options = {"priority": 5, "max_attempts": 2, "ttl": 60, "timeout": 3, "retry_cap": 9}
    native = tasks.record.using(**options).submission((1,), {})
    django = dj.add.using(**options)
    from dtq.backends import submission

    theirs = submission(django, (1,), {})
    for name in ("priority", "max_attempts", "ttl", "timeout", "retry", "delay"):
        assert getattr(native, name) == getattr(theirs, name), name


def test_run_after_gives_the_delay(dtq_env: Any) -> None:
    assert delay_of(None) == 0.0
    assert delay_of(timedelta(seconds=-5)) == 0.0  # the past is now
    assert delay_of(timedelta(minutes=1)) == 60.0
    soon = datetime.now(UTC) + timedelta(seconds=30)
    assert 29 < delay_of(soon) <= 30


def test_a_naive_run_after_is_refused_on_both_task_kinds(dtq_env: Any) -> None:
    expected = message_of("run_after", NAIVE)
    assert "naive" in expected and "time zone" in expected
    with pytest.raises(InvalidTaskError) as native:
        tasks.record.using(run_after=NAIVE)
    with pytest.raises(InvalidTask) as django:
        dj.add.using(run_after=NAIVE)
    assert str(native.value) == str(django.value) == expected


def test_the_error_is_an_invalid_task_and_a_submit_error() -> None:
    with pytest.raises(InvalidOption) as caught:
        TaskOptions(priority=500)
    assert isinstance(caught.value, InvalidTaskError) and isinstance(caught.value, SubmitError)


def test_valid_options_are_kept() -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    options = TaskOptions(
        queue_name="tests",
        priority=-100,
        max_attempts=1000,
        retry_base=0.5,
        retry_cap=10,
        retry_jitter=0,
        timeout=MAX_SECONDS,
        ttl=1,
        run_after=later,
        idempotency_key="order-1:a/b+c=d@e",
        retry_on=(ValueError, KeyError),
    )
    assert options.run_after == later and options.retry_on == (ValueError, KeyError)


def test_accepted_submission_uses_the_options(dtq_env: Any) -> None:
    accepted = submit(tasks.record.using(priority=50, max_attempts=7).submission((1,), {}))
    record = read_side.get_task(accepted.id)
    assert record is not None and (record["priority"], record["max_attempts"]) == (50, 7)


def test_the_commands_give_the_same_queue_message(dtq_env: Any) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError) as caught:
        call_command("dtq_queue", "pause", "has space")
    assert message_of("queue_name", "has space") in str(caught.value)


def test_an_aware_run_after_works_without_use_tz(settings: Any) -> None:
    settings.USE_TZ = False
    soon = datetime.now(UTC) + timedelta(seconds=30)
    assert 29 < delay_of(soon) <= 30
    with pytest.raises(InvalidOption, match="naive"):
        delay_of(datetime.now())
