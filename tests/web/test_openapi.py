"""schemathesis against the served OpenAPI document: for inputs it generates
from the document, valid and not, no 5xx, and every response (status, content
type, body) as the document says."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from starlette.applications import Starlette
from starlette.routing import Route

from tenure import App, chain
from tenure.core.workflows import Step
from tenure.job import JobSpec
from tenure.web import asgi_app
from tenure.web.openapi import document
from tests.web.conftest import Served

EXAMPLES = 12  # per operation and mode: the whole test stays within seconds
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]
ENDLESS = {"/api/events"}  # a stream never ends: its own tests read it


def exercise(operation: schemathesis.APIOperation, mode: GenerationMode, base_url: str,
             existing: dict[str, str]) -> None:  # fmt: skip
    """``existing``: by path parameter, the id of a job (a workflow) that exists."""
    calls = itertools.count()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def call(case: schemathesis.Case) -> None:
        for name, value in existing.items():
            if case.path_parameters and name in case.path_parameters and next(calls) % 2:
                case.path_parameters[name] = value  # half the time, one that exists
        case.call_and_validate(base_url=base_url, checks=CHECKS)

    try:
        call()
    except Unsatisfiable:
        # An operation without parameters or body has no invalid input.
        assert mode is GenerationMode.NEGATIVE and not operation.path_parameters


def test_openapi__no_5xx_and_responses_match_the_document(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    app = App(f"sqlite:///{tmp_path / 'tenure.db'}")
    try:
        server = serve(app)
        job = app.enqueue("t", {"n": 1}, queue="default")
        workflow = app.workflow(chain(Step(JobSpec.create("a")), Step(JobSpec.create("b"))))
        existing = {"id": job.id, "workflow": workflow.id}
        schema = schemathesis.openapi.from_url(f"{server.url}/api/openapi.json")
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) == 17
        for operation in operations:
            if operation.path not in ENDLESS:
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    exercise(operation, mode, server.url, existing)
    finally:
        app.close()


def test_served_routes__are_the_documents_operations(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'tenure.db'}")
    try:
        server = asgi_app(app)
    finally:
        app.close()
    assert isinstance(server.inner, Starlette)
    api = [r for r in server.inner.routes if isinstance(r, Route)
           and (r.path.startswith("/api/") or r.path == "/metrics")
           and r.path != "/api/openapi.json"]  # fmt: skip
    served = sorted((m, r.path) for r in api for m in r.methods or () if m != "HEAD")
    paths = document()["paths"].items()
    documented = sorted((m.upper(), p) for p, item in paths for m in item if m != "parameters")
    assert served == documented
