"""Durable submit without replicas to spare: the choice of WAIT or WAITAOF, and the API's 503.

The end-to-end tests (a real primary with replicas) are in tests/test_sentinel.py.
"""

import pytest

from dtq.api.errors import from_engine
from dtq.engine import durable
from dtq.engine.errors import NotReplicated, SubmitError
from dtq.engine.submit import Submission, submit
from tests.testapp import tasks


@pytest.mark.parametrize(
    "version, aof, command",
    [
        ("7.0.15", "1", "WAIT"),  # no WAITAOF before 7.2
        ("7.2.4", "0", "WAIT"),  # nothing on disk to wait for
        ("7.2.4", "1", "WAITAOF"),  # Redis 7.2+ and Valkey (which reports 7.2.4)
        ("8.0.0", "1", "WAITAOF"),
        ("6.2.14", "1", "WAIT"),
    ],
)
def test_waitaof_only_where_the_server_has_it_and_keeps_an_aof(version, aof, command):
    assert durable._choose({"redis_version": version}, {"aof_enabled": aof}) == command


def test_not_replicated_is_a_submit_error_and_a_503():
    exc = NotReplicated("task x", 2, 1, 0.5)
    assert isinstance(exc, SubmitError)
    error = from_engine(exc)
    assert error.status_code == 503
    assert error.detail.code == "not_replicated"
    assert error.details == {"wanted": 2, "replicas": 1}


def test_a_server_without_replicas_refuses_a_durable_submit(dtq_env):
    dtq_env.configure(SUBMIT_REPLICAS=1, SUBMIT_REPLICAS_TIMEOUT=0.05)
    with pytest.raises(NotReplicated, match=r"only 0 of 1 replica\(s\)"):
        submit(Submission(name=tasks.record.name, queue="tests"))
    dtq_env.configure(SUBMIT_REPLICAS=0)
    assert submit(Submission(name=tasks.record.name, queue="tests")).state == "QUEUED"
