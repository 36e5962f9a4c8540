"""OpenTelemetry traces: the enqueue's trace context is stored with the job,
and its attempt runs in a child span ``tenure.run <task>`` with the
attempt's attributes; without OpenTelemetry, tenure imports none of it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tenure import App, State, WorkerConfig
from tenure.worker import run_worker

EXPORTER = InMemorySpanExporter()


class WhileTesting(SpanProcessor):
    """Exports ended spans while a test of this module listens: the tracer
    provider is global, set once per process, and outlives the module."""

    listening = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.listening:
            EXPORTER.export([span])


PROCESSOR = WhileTesting()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(PROCESSOR)
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    PROCESSOR.listening = True
    yield EXPORTER
    PROCESSOR.listening = False
    EXPORTER.clear()


def traceparent_of(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_an_attempt_runs_in_a_child_span_of_its_enqueue(
    backend_url: str, spans: InMemorySpanExporter
) -> None:
    with App(backend_url) as app:

        @app.task
        def ship(order: int) -> int:
            return order

        @app.task(max_attempts=1)
        def refuse() -> None:
            raise ValueError("declined")

        with trace.get_tracer("shop").start_as_current_span("checkout") as checkout:
            job = ship.enqueue(7)
            [failed] = app.enqueue_many("refuse", [{}])
        untraced = ship.enqueue(8)
        assert app.get_job(job.id).traceparent == traceparent_of(checkout)
        assert app.get_job(failed.id).traceparent == traceparent_of(checkout)
        assert app.get_job(untraced.id).traceparent is None

        run_worker(app, WorkerConfig(pool="thread", concurrency=1, burst=True))
        assert app.get_job(job.id).state is State.COMPLETED
        assert app.get_job(failed.id).state is State.DEAD

    runs = {
        s.attributes["tenure.job_id"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("tenure.run ") and s.attributes
    }
    parent = checkout.get_span_context()
    for job_id, name, outcome in ((job.id, "tenure.run ship", "completed"),
                                  (failed.id, "tenure.run refuse", "error")):  # fmt: skip
        span = runs[job_id]
        assert span.name == name and span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) == (parent.trace_id, parent.span_id)
        assert dict(span.attributes or {}) == {
            "tenure.job_id": job_id, "tenure.queue": "default", "tenure.attempt": 1,
            "tenure.fence": 1, "tenure.outcome": outcome,
        }  # fmt: skip
    assert runs[failed.id].status.status_code is StatusCode.ERROR
    assert runs[untraced.id].parent is None  # a root span: its enqueue was not traced


def test_without_opentelemetry_in_the_process__tenure_imports_none_of_it(
    tmp_path: Path,
) -> None:
    """Installed (the dev extra) but never imported by the process: tenure
    neither imports nor even looks for it, enqueueing or running a job."""
    script = textwrap.dedent(f"""
        import sys

        class Watch:
            looked = []
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    self.looked.append(name)
                return None

        sys.meta_path.insert(0, Watch())
        import tenure
        from tenure.worker import run_worker

        app = tenure.App("sqlite:///{tmp_path / "t.db"}")

        @app.task
        def add(a, b):
            return a + b

        job = add.enqueue(1, 2)
        run_worker(app, tenure.WorkerConfig(pool="thread", burst=True))
        assert app.get_job(job.id).result == 3
        assert Watch.looked == [], Watch.looked
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
