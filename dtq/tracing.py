"""OpenTelemetry traces (the `tracing` extra): a producer span per enqueue, and a consumer span
per attempt that continues the enqueuer's trace, with retries, reclaims and dead-lettering as
span events (docs/tracing.md).

The trace context travels as a propagator (dtq.propagation) named "otel". Without
opentelemetry-api installed, ENABLED is False (checked once, here) and every hook is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, SpanKind, StatusCode
except ImportError:  # the `tracing` extra is not installed
    ENABLED = False
else:
    ENABLED = True

log = logging.getLogger("dtq.tracing")
PROPAGATOR_NAME = "otel"
_open: dict[tuple[str, int], Any] = {}  # the consumer span of each attempt in progress
_tracers: dict[int, Any] = {}  # one tracer per provider (a test may set another one)


def active() -> bool:
    """Return True when OpenTelemetry is installed and a real tracer provider is set."""
    if not ENABLED:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider))


def _tracer() -> Any:
    provider = trace.get_tracer_provider()
    tracer = _tracers.get(id(provider))
    if tracer is None:
        from dtq import __version__

        tracer = _tracers[id(provider)] = provider.get_tracer("dtq", __version__)
    return tracer


class TracePropagator:
    """Carries the W3C trace context (traceparent, tracestate) of the enqueuing span."""

    name = PROPAGATOR_NAME

    def capture(self) -> Any:
        """Return the current trace context as a carrier dict (None outside any trace)."""
        if not otel_context.get_current():  # no span, no baggage: nothing to inject
            return None
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier or None

    @contextmanager
    def restore(self, value: Any) -> Iterator[None]:
        """Make the carried trace context current, so the attempt's span is its child."""
        token = otel_context.attach(propagate.extract(value if isinstance(value, dict) else {}))
        try:
            yield
        finally:
            otel_context.detach(token)


def install() -> None:
    """Register the trace propagator when OpenTelemetry is installed (dtq's AppConfig.ready)."""
    if ENABLED:
        from dtq import propagation

        propagation.register(TracePropagator())


# ----- producer: enqueue ---------------------------------------------------------------------


def producing(sub: Any) -> AbstractContextManager[Any]:
    """Return the producer span of one submission, current while it is enqueued."""
    if not active():
        return contextlib.nullcontext()
    return _tracer().start_as_current_span(  # type: ignore[no-any-return]
        f"enqueue {sub.name}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "dtq",
            "messaging.operation.type": "send",
            "messaging.destination.name": sub.queue,
            "dtq.task.name": sub.name,
        },
    )


def accepted(span: Any, result: Any) -> None:
    """Record the id Redis accepted the task under (and whether it was a duplicate)."""
    if span is not None:
        span.set_attribute("messaging.message.id", result.id)
        span.set_attribute("dtq.duplicate", bool(result.duplicate))


# ----- consumer: each attempt ----------------------------------------------------------------


@contextmanager
def consuming(att: Any) -> Iterator[None]:
    """Start the attempt's consumer span, current around the handler; finish() ends it."""
    from dtq.engine import ids

    wait_ms = max(int(att.started_at * 1000) - ids.created_ms(att.id), 0)
    span = _tracer().start_span(
        f"run {att.name}",
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "dtq",
            "messaging.operation.type": "process",
            "messaging.destination.name": att.queue,
            "messaging.message.id": att.id,
            "dtq.task.name": att.name,
            "dtq.attempt": att.attempt,
            "dtq.max_attempts": att.max_attempts,
            "dtq.wait_ms": wait_ms,
        },
    )
    _open[(att.id, att.attempt)] = span
    if att.attempt > 1 and span.is_recording():  # no read when no SDK records the trace
        _mark_reclaim(span, att)
    # finish() records the exception and the status, once the outcome is known.
    with trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    ):
        yield


def _mark_reclaim(span: Any, att: Any) -> None:
    """Add a "reclaimed" event when the attempt before this one was lost by its worker."""
    from dtq.engine import codec, shards

    try:
        keys = shards.of_task(att.id)
        raw = shards.client(keys.shard).hget(keys.task(att.id), "history")
        last = (codec.loads(raw) or [{}])[-1] if raw else {}
    except Exception as exc:  # a trace detail never fails the task
        log.debug("task_id=%s: history not read for the trace: %s", att.id, exc)
        return
    if isinstance(last, dict) and last.get("outcome") == "lost":
        span.add_event(
            "reclaimed",
            {
                "dtq.reclaimed.attempt": int(last.get("attempt") or 0),
                "dtq.reclaimed.worker": str(last.get("worker") or ""),
                "dtq.reclaimed.reason": str(last.get("message") or ""),
            },
        )


def finish(att: Any, outcome: Any) -> Any:
    """End the attempt's consumer span with its outcome; return the outcome unchanged."""
    span = _open.pop((att.id, att.attempt), None) if _open else None
    if span is None:
        return outcome
    from dtq.conf import dtq_settings

    span.set_attribute("dtq.outcome", outcome.kind)
    if outcome.exc is not None:
        span.record_exception(outcome.exc)
    if outcome.kind == "success":
        span.set_status(StatusCode.OK)
    else:
        span.set_status(StatusCode.ERROR, type(outcome.exc).__name__ if outcome.exc else "")
    if outcome.kind == "retry":
        span.add_event("retry", {"dtq.retry.delay_ms": outcome.delay_ms})
    elif outcome.kind == "fail" and dtq_settings.DLQ_ENABLED:
        span.add_event("dead_lettered", {"dtq.attempt": att.attempt})
    span.end()
    return outcome
