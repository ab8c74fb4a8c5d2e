"""The task search language (read_side.query): every filter against real records on Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dtq.engine import codec, read_side
from dtq.engine.read_side import query
from dtq.engine.read_side.query import QueryError, parse
from tests.ops_support import claim_by_hand, finalize_by_hand
from tests.testapp import tasks


def found(text: str, **kwargs: Any) -> list[str]:
    """Return the ids of every task the query finds (following cursors), newest first."""
    ids: list[str] = []
    cursor = None
    for _ in range(50):
        page = query.run(parse(text), 100, cursor, **kwargs)
        ids += [t["id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids
    raise AssertionError("the search did not end")


@pytest.fixture
def sample(dtq_env: Any) -> dict[str, str]:
    """Tasks in several states, queues, workers, arguments and errors."""
    made: dict[str, str] = {}
    made["user42"] = tasks.record.enqueue(value={"user_id": 42}).id
    made["plain"] = tasks.record.enqueue(7).id
    made["other"] = tasks.record.using(queue_name="other").enqueue("hello world").id
    made["flaky"] = tasks.flaky.enqueue(failures=2).id
    # The two `record` tasks of "tests" that come first: one fails, one runs on worker w-7.
    [failed] = claim_by_hand("tests", 1, worker="w-1")
    error = {"class": "builtins.KeyError", "message": "no route to host"}
    assert finalize_by_hand(failed, "fail", error) == 1
    [running] = claim_by_hand("tests", 1, worker="w-7")
    made["failed"], made["running"] = failed["id"], running["id"]
    return made


def test_argument_values_by_position_and_keyword(sample: dict[str, str]) -> None:
    # record's one argument is `value`: enqueue(7) is args [7], value={...} is a kwarg.
    assert found("args.0=7") == [sample["plain"]]
    assert found("kwargs.value.user_id=42") == [sample["user42"]]
    assert found("kwargs.value.user_id=43") == []
    assert found('args.0="hello world"') == [sample["other"]]
    assert found("kwargs.failures>=2") == [sample["flaky"]]
    assert found("args.0=true") == []  # true is not 7, nor 1


def test_substring_of_the_arguments_json(sample: dict[str, str]) -> None:
    assert found('"hello wor"') == [sample["other"]]
    assert found("args~hello") == [sample["other"]]
    assert found("kwargs~user_id") == [sample["user42"]]
    assert found("nothing-like-this") == []


def test_name_queue_and_state(sample: dict[str, str]) -> None:
    assert found("task:tests.testapp.tasks.flaky") == [sample["flaky"]]
    assert found("queue:other") == [sample["other"]]
    assert set(found("queue:tests,other")) == set(sample.values())
    assert found("state:DEAD_LETTERED") == [sample["failed"]]
    assert found("state:running") == [sample["running"]]
    assert set(found("state:dead_lettered,RUNNING")) == {sample["failed"], sample["running"]}
    assert found("state:DEAD_LETTERED queue:other") == []


def test_worker_attempt_and_error(sample: dict[str, str]) -> None:
    assert found("worker:w-7") == [sample["running"]]
    assert set(found("worker:w-")) == {sample["failed"], sample["running"]}
    assert set(found("attempt>=1")) == {sample["failed"], sample["running"]}
    assert sample["other"] in found("attempt=0")
    assert sample["failed"] not in found("attempt<1")
    assert found("error:route") == [sample["failed"]]
    assert found("error:KEYERROR") == [sample["failed"]]
    assert found("error.class:builtins.KeyError") == [sample["failed"]]
    assert found("error.class:KeyError") == []
    assert found('error.message:"no route"') == [sample["failed"]]


def test_time_ranges(sample: dict[str, str]) -> None:
    now = time.time()
    everything = set(sample.values())
    assert set(found("created>-1h")) == everything
    assert found(f"created>{now + 60}") == []
    assert found("created<2020-01-01") == []
    assert set(found("started>-1h")) == {sample["failed"], sample["running"]}
    assert found("finished>-1h") == [sample["failed"]]
    assert found(f"finished<{now - 3600}") == []
    assert set(found("started<=-0s")) == {sample["failed"], sample["running"]}


def test_terms_combine_and_the_queue_list_narrows(sample: dict[str, str]) -> None:
    assert found("state:DEAD_LETTERED error:route worker:w-1 attempt=1") == [sample["failed"]]
    assert found("state:DEAD_LETTERED worker:w-7") == []
    assert found("args~hello", queues=["tests"]) == []
    assert found("queue:other", queues=["tests"]) == []


def test_a_filter_that_reads_records_stays_within_the_budget(dtq_env: Any) -> None:
    for i in range(30):
        tasks.record.enqueue(i)
    with read_side.read_budget(12) as budget:
        page = query.run(parse("args.0=0"), 5)
    assert budget.spent <= 12
    assert page["partial"] is True and page["next_cursor"] is not None
    assert page["tasks"] == []  # the oldest task matches; the budget stops short of it
    assert len(found("args.0=0")) == 1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("state:DONE", "no state 'DONE'"),
        ("attempt>x", "not a whole number"),
        ("created>yesterday", "not a time"),
        ("colour:red", "unknown field 'colour'"),
        ("args=3", "name an argument"),
        ("worker>3", "does not apply"),
        ('error:"open', "cannot be split"),
        ("queue:bad/name", "invalid queue name"),
        ("task:", "no value"),
        ("error.stack:x", "error fields are"),
    ],
)
def test_bad_queries_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(QueryError, match=says):
        parse(text)


def test_query_text_is_json_only(dtq_env: Any) -> None:
    # A value is decoded as JSON or kept as a string, never evaluated.
    q = parse("kwargs.x=__import__(1)")
    record = {"payload": codec.loads('{"args": [], "kwargs": {"x": "__import__(1)"}}')}
    assert q.matches(record)
    # Quoted JSON is a string: "42" is not 42.
    number = {"payload": {"args": [42], "kwargs": {}}}
    assert parse("args.0=42").matches(number)
    assert not parse("args.0='\"42\"'").matches(number)
