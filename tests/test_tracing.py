"""OpenTelemetry traces (dtq/tracing.py) with the SDK's in-memory exporter: one trace from the
enqueuing request to the handler, across a retry, a dead-lettering and a reclaim after a real
worker process was killed mid-task.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

import dtq
from dtq import propagation, tracing
from dtq.engine import codec
from dtq.engine.reaper import Reaper
from dtq.testing import run_queued
from tests.conftest import Env, wait_for
from tests.testapp import tasks

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    """Record every span of this module's tests in memory (a process has one provider)."""
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(sdk)
    yield
    _exporter.shutdown()
    # Unset the provider as OpenTelemetry's own test utilities do, so later tests run with
    # tracing inactive (dtq.tracing.active() is False again).
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    assert not tracing.active()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@dtq.task(queue_name="tests", takes_context=True, max_attempts=3)
def traced(context: dtq.TaskContext, fail_first: bool = False) -> str:
    """Open a span inside the handler; fail the first attempt if asked."""
    with trace.get_tracer("tests").start_as_current_span("inside handler"):
        if fail_first and context.attempt == 1:
            raise dtq.RetryableError("first attempt fails", delay=0.01)
    return "done"


@dtq.task(queue_name="tests", max_attempts=1)
def always_fails() -> None:
    """Raise, with no retry left: the task is dead-lettered."""
    raise ValueError("no")


def _by_name(spans: InMemorySpanExporter) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in spans.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def _enqueue_in_request(task: Any, *args: Any) -> tuple[Any, Any]:
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        result = task.enqueue(*args)
    return request, result


def test_the_propagator_is_registered_when_opentelemetry_is_installed(dtq_env):
    assert tracing.ENABLED and tracing.PROPAGATOR_NAME in propagation.registered()


def test_one_trace_from_enqueue_to_the_handler_across_a_retry(dtq_env, spans):
    request, result = _enqueue_in_request(traced, True)
    record = dtq_env.client.hget(dtq_env.keys.task(result.id), "payload")
    assert codec.loads(record)["args"] == [True]  # the handler's arguments are untouched
    assert "traceparent" in codec.loads(record)["ctx"]["otel"]
    assert run_queued("tests") == [result.id]
    wait_for(lambda: run_queued("tests"), timeout=5, interval=0.02)  # the retry, once due
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2), [
        (h.get("outcome"), h.get("error"), h.get("message")) for h in result.history
    ]

    found = _by_name(spans)
    [producer] = found["enqueue tests.test_tracing.traced"]
    first, second = sorted(found["run tests.test_tracing.traced"], key=lambda s: s.start_time)
    inside = found["inside handler"]
    trace_id = request.get_span_context().trace_id
    all_spans = [producer, first, second, *inside]
    assert {s.context.trace_id for s in all_spans} == {trace_id}
    assert producer.kind == SpanKind.PRODUCER and producer.parent.span_id == request.context.span_id
    assert producer.attributes["messaging.message.id"] == result.id
    for span, attempt in ((first, 1), (second, 2)):
        assert span.kind == SpanKind.CONSUMER and span.parent.span_id == producer.context.span_id
        assert span.attributes["dtq.attempt"] == attempt
        assert span.attributes["messaging.destination.name"] == "tests"
        assert span.attributes["dtq.wait_ms"] >= 0
    assert first.attributes["dtq.outcome"] == "retry"
    assert first.status.status_code == StatusCode.ERROR
    assert [e.name for e in first.events] == ["exception", "retry"]
    assert second.attributes["dtq.outcome"] == "success"
    assert second.status.status_code == StatusCode.OK
    assert {s.parent.span_id for s in inside} == {first.context.span_id, second.context.span_id}


def test_dead_lettering_is_a_span_event(dtq_env, spans):
    _, result = _enqueue_in_request(always_fails)
    assert run_queued("tests") == [result.id]
    [span] = _by_name(spans)["run tests.test_tracing.always_fails"]
    assert span.attributes["dtq.outcome"] == "fail"
    assert [e.name for e in span.events] == ["exception", "dead_lettered"]


@pytest.mark.slow
def test_a_reclaimed_attempt_continues_the_trace(dtq_env: Env, spans):
    dtq_env.configure(LEASE_TIMEOUT=0.8)
    request, result = _enqueue_in_request(tasks.crash_once)
    worker = dtq_env.worker()  # a real process: attempt 1 SIGKILLs it mid-task
    wait_for(lambda: worker.poll() is not None, timeout=20)
    wait_for(lambda: Reaper().run_once(), timeout=10, interval=0.1)  # once the lease ran out
    assert run_queued("tests") == [result.id]
    result.refresh()
    assert (result.state, result.attempt) == (dtq.TaskState.SUCCEEDED, 2)

    [span] = _by_name(spans)["run tests.testapp.tasks.crash_once"]
    assert span.context.trace_id == request.get_span_context().trace_id
    assert span.attributes["dtq.attempt"] == 2
    [event] = [e for e in span.events if e.name == "reclaimed"]
    assert event.attributes["dtq.reclaimed.attempt"] == 1
    assert "stopped renewing its lease" in event.attributes["dtq.reclaimed.reason"]
