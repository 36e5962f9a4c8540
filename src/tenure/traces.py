"""OpenTelemetry traces, when the process uses OpenTelemetry (``tenure[otel]``).

An enqueue stores the current span's context with the job, as a W3C
``traceparent``; the attempt then runs in a span ``tenure.run <task>``, its
child, whatever process or host runs it, with the attempt's queue, number,
fence, outcome and job id as attributes.

tenure never imports OpenTelemetry itself: it traces only where the process
imported it already, as configuring a tracer provider does. Without it
nothing of OpenTelemetry is imported and each step costs a dict lookup.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenure.context import JobContext

# version 00: trace id, span id, flags; all-zero ids are invalid
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
SPAN_PREFIX = "tenure.run "


def _otel() -> Any:
    """``opentelemetry.trace`` if this process imported it, else None."""
    return sys.modules.get("opentelemetry.trace")


def current_traceparent() -> str | None:
    """The current span's context as a W3C traceparent; None when there is no
    valid one (no OpenTelemetry, or no span)."""
    trace = _otel()
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def traced(job: JobContext) -> bool:
    """Whether the attempt's span would be seen: OpenTelemetry is imported
    and a tracer provider is set, or the job carries a trace to continue.
    Otherwise the span would be a non-recording copy of the current one,
    not worth its cost on every job (libraries such as redis-py import
    OpenTelemetry whenever it is installed)."""
    trace = _otel()
    if trace is None:
        return False
    return job.traceparent is not None or not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


@contextlib.contextmanager
def attempt_span(job: JobContext) -> Iterator[None]:
    """Run the block (the handler, its hooks) in the attempt's span, a child of
    the enqueue's; a plain block when it would not be seen (``traced``)."""
    if not traced(job):
        yield
        return
    trace = _otel()
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = None
    if job.traceparent is not None:
        parent = TraceContextTextMapPropagator().extract({"traceparent": job.traceparent})
    attributes = {"tenure.job_id": job.id, "tenure.queue": job.queue,
                  "tenure.attempt": job.attempt, "tenure.fence": job.fence}  # fmt: skip
    tracer = trace.get_tracer("tenure")
    with tracer.start_as_current_span(
        SPAN_PREFIX + job.task, context=parent, kind=trace.SpanKind.CONSUMER,
        attributes=attributes, record_exception=True, set_status_on_exception=True,
    ) as span:  # fmt: skip
        try:
            yield
        except BaseException:
            span.set_attribute("tenure.outcome", "error")
            raise
        span.set_attribute("tenure.outcome", "completed")
