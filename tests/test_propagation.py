"""Context propagation (dtq/propagation.py): request-scoped values from enqueue() to every
attempt, run in-process through the real scripts; and dtq without OpenTelemetry installed.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import pytest
from django.utils import translation

import dtq
from dtq import propagation, tracing
from dtq.compat import task
from dtq.engine import codec
from dtq.testing import run_queued
from tests.conftest import ROOT

request_id: ContextVar[str] = ContextVar("request_id")
tenant: ContextVar[str] = ContextVar("tenant")


@dtq.task(queue_name="tests")
def report(value: Any = None) -> dict[str, Any]:
    """Return the context the attempt runs in, and the argument it got."""
    return {
        "request_id": request_id.get(None),
        "tenant": tenant.get(None),
        "language": translation.get_language(),
        "value": value,
    }


@task(queue_name="tests")
def django_report() -> dict[str, Any]:
    """The same, as a django.tasks task on DtqBackend."""
    return {"request_id": request_id.get(None), "tenant": tenant.get(None)}


class Broken:
    """A propagator whose restore raises."""

    name = "broken"

    def capture(self) -> Any:
        return "x"

    def restore(self, value: Any) -> Any:
        raise RuntimeError("cannot restore")


@pytest.fixture
def propagators() -> Iterator[None]:
    added = [
        propagation.register(propagation.ContextVarPropagator("request_id", request_id)),
        propagation.register(propagation.ContextVarPropagator("tenant", tenant)),
        propagation.register(propagation.LanguagePropagator()),
    ]
    yield
    for propagator in added:
        propagation.unregister(propagator.name)


def _payload(env: Any, task_id: str) -> dict[str, Any]:
    return codec.loads(env.client.hget(env.keys.task(task_id), "payload"))


def test_values_reach_every_attempt_and_never_the_handler(dtq_env, propagators):
    token = request_id.set("req-42")
    try:
        with translation.override("fr"):
            result = report.enqueue("arg")
    finally:
        request_id.reset(token)
    assert request_id.get(None) is None and tenant.get(None) is None
    payload = _payload(dtq_env, result.id)
    assert payload["args"] == ["arg"] and payload["kwargs"] == {}
    assert payload["ctx"]["request_id"] == "req-42" and payload["ctx"]["language"] == "fr"
    assert "tenant" not in payload["ctx"]  # unset: nothing carried
    assert run_queued("tests") == [result.id]
    result.refresh()
    assert result.return_value == {
        "request_id": "req-42",
        "tenant": None,
        "language": "fr",
        "value": "arg",
    }
    assert request_id.get(None) is None  # restored only for the attempt


def test_django_tasks_carry_them_too(dtq_env, propagators):
    token = tenant.set("acme")
    try:
        result = django_report.enqueue()
    finally:
        tenant.reset(token)
    run_queued("tests")
    result.refresh()
    assert result.return_value == {"request_id": None, "tenant": "acme"}


def test_nothing_to_carry_leaves_the_payload_as_it_was(dtq_env):
    otel = propagation._propagators.pop(tracing.PROPAGATOR_NAME, None)  # a trace is carried
    try:
        result = report.enqueue(1)
    finally:
        if otel is not None:
            propagation.register(otel)
    assert _payload(dtq_env, result.id) == {"args": [1], "kwargs": {}}


def test_the_carried_context_is_not_part_of_the_idempotency_fingerprint(dtq_env, propagators):
    first_token = request_id.set("req-1")
    first = report.using(idempotency_key="once").enqueue(1)
    request_id.reset(first_token)
    run_queued("tests")
    second_token = request_id.set("req-2")
    second = report.using(idempotency_key="once").enqueue(1)  # a retried request, say
    request_id.reset(second_token)
    assert second.duplicate and second.id == first.id


def test_a_failing_restore_is_logged_and_the_task_runs(dtq_env, propagators, caplog):
    propagation.register(Broken())
    try:
        result = report.enqueue(2)
        run_queued("tests")
    finally:
        propagation.unregister("broken")
    result.refresh()
    assert result.state == dtq.TaskState.SUCCEEDED
    assert "propagator 'broken' failed to restore" in caplog.text


def test_a_propagator_needs_a_name():
    with pytest.raises(ValueError, match="non-empty name"):
        propagation.register(propagation.ContextVarPropagator("", request_id))


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the tracing extra were not installed
import django, json
django.setup()
from dtq import propagation, tracing
from dtq.engine import executor
att = executor.Attempt("01", "e", 0, 1, "tests.testapp.tasks.record", '{"args":[],"kwargs":{}}',
                       1, 3, None, "{}", "")
task, args, kwargs = executor.prepare_call(att, "ctx")
print(json.dumps([tracing.ENABLED, propagation.registered(), type(task).__name__]))
"""


def test_without_opentelemetry_nothing_is_wrapped_or_carried(dtq_env):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        cwd=ROOT,
        env=dtq_env.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # the registry's own Task, not a wrapper: the handler runs exactly as before
    assert json.loads(done.stdout) == [False, [], "Task"]
