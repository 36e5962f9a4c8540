"""check_graph: the one place a workflow's graph is judged before storage."""

from __future__ import annotations

import dataclasses

import pytest

from tenure.core.workflows import (
    Step,
    StepSpec,
    WorkflowSpec,
    chain,
    check_graph,
    compile_flow,
    group,
)
from tenure.errors import InvalidInput
from tenure.job import JobSpec


def flow() -> WorkflowSpec:
    a, b, c = (Step(JobSpec.create(name)) for name in "abc")
    return compile_flow(chain(a, group(b, c)))


def test_a_compiled_flow__is_a_good_graph() -> None:
    spec = flow()
    assert check_graph(spec) is spec


@pytest.mark.parametrize(
    "upstream",
    [(1,), (2,), (-1,), (0, 0), ("0",)],
    ids=["itself", "later", "negative", "twice", "not an index"],
)
def test_an_upstream_not_an_earlier_step_once__is_refused(upstream: tuple[object, ...]) -> None:
    spec = flow()
    steps = list(spec.steps)
    steps[1] = dataclasses.replace(steps[1], upstream=upstream)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="earlier"):
        check_graph(dataclasses.replace(spec, steps=tuple(steps)))


@pytest.mark.parametrize("sinks", [(), (3,), (1, 1), (-1,)])
def test_sinks_not_steps_once__are_refused(sinks: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInput, match="sinks"):
        check_graph(dataclasses.replace(flow(), sinks=sinks))


def test_a_duplicate_or_workflow_like_job_id__is_refused() -> None:
    spec = flow()
    a, b, c = spec.steps
    twice = dataclasses.replace(c, spec=dataclasses.replace(c.spec, id=b.spec.id))
    with pytest.raises(InvalidInput, match="same job id"):
        check_graph(dataclasses.replace(spec, steps=(a, b, twice)))
    wf_like = dataclasses.replace(c, spec=dataclasses.replace(c.spec, id="wf-1"))
    with pytest.raises(InvalidInput, match="may not start"):
        check_graph(dataclasses.replace(spec, steps=(a, b, wf_like)))


def test_a_bad_id_key_or_no_steps__are_refused_but_a_spawn_ignores_id_and_key() -> None:
    spec = flow()
    with pytest.raises(InvalidInput, match="workflow id"):
        check_graph(dataclasses.replace(spec, id="x"))
    with pytest.raises(InvalidInput, match="key"):
        check_graph(dataclasses.replace(spec, key=""))
    with pytest.raises(InvalidInput, match="steps"):
        check_graph(dataclasses.replace(spec, steps=(), sinks=()))
    assert check_graph(dataclasses.replace(spec, id="x", key=""), spawn=True)
    with pytest.raises(InvalidInput, match="WorkflowSpec"):
        check_graph(StepSpec(spec.steps[0].spec, ()))  # type: ignore[arg-type]
