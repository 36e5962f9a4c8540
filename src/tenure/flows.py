"""Workflows as an App and a worker use them: waiting for a workflow's result,
and what a step's handler gets as ``current_job().upstream``.

What a flow is and what storage keeps of it: ``tenure.core.workflows``; a
flow as JSON (the HTTP API's, and a spawn's on its way from an executor).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.names import shown
from tenure.core.states import TERMINAL, DeadReason, State
from tenure.core.workflows import (
    MAX_DEPTH,
    Chain,
    Failed,
    Flow,
    Group,
    Step,
    Workflow,
    WorkflowState,
    chain,
    group,
    result_of,
)
from tenure.errors import InvalidInput, JobCancelled, JobFailed
from tenure.job import Job, JobSpec
from tenure.results import check_timeout, wait_result

if TYPE_CHECKING:
    from tenure.backends.base import Backend

SETTLE_PAUSE = 0.05


def value_of(job: Job | None, job_id: str) -> Any:
    """What a dependent sees of a step that ended: its result, or a Failed."""
    if job is None:
        return Failed(job_id, "", None, "the step's job is gone (pruned)")
    return job.result if job.state is State.COMPLETED else Failed.of(job)


def encode_values(values: Sequence[Any]) -> list[list[Any]]:
    """Values of steps as JSON (for an executor's pipe): a Failed is tagged."""
    return [["f", v.job_id, v.task, v.dead_reason, v.error] if isinstance(v, Failed)
            else ["v", v] for v in values]  # fmt: skip


def decode_values(encoded: Sequence[Sequence[Any]]) -> list[Any]:
    return [Failed(e[1], e[2], None if e[3] is None else DeadReason(e[3]), e[4])
            if e[0] == "f" else e[1] for e in encoded]  # fmt: skip


async def values_of(backend: Backend, job_ids: Sequence[str]) -> list[Any]:
    """The values of the steps ``job_ids``, in order, in one read."""
    found = {job.id: job for job in await backend.get_many(job_ids)} if job_ids else {}
    return [value_of(found.get(i), i) for i in job_ids]


def culprit(workflow: Workflow) -> Job:
    """The step that failed the workflow: the first that ended dead, or
    cancelled by hand, without ``may_fail``; else its first cancelled step."""
    ended = [j for j in workflow.jobs if j.state in (State.DEAD, State.CANCELLED)]
    for job in ended:
        if not job.may_fail and (job.state is State.DEAD or job.cancel_reason is None):
            return job
    return ended[0]


async def wait_workflow(backend: Backend, workflow_id: str, timeout: float | None) -> Any:
    """The workflow's result once it completed (its last step's, or a list of
    its last group's, in order), waiting on its sinks' events; JobFailed (or
    JobCancelled) naming the step that failed it; TimeoutError; JobNotFound."""
    deadline = time.monotonic() + check_timeout(timeout)
    while True:
        workflow = await backend.get_workflow(workflow_id)
        if workflow.state is WorkflowState.COMPLETED:
            return result_of(workflow, await values_of(backend, workflow.sinks))
        if workflow.state is not WorkflowState.RUNNING:
            job = culprit(workflow)
            raise JobFailed(job) if job.state is State.DEAD else JobCancelled(job)
        jobs = workflow.by_id()
        waiting = [i for i in workflow.sinks if i in jobs and jobs[i].state not in TERMINAL]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"workflow {workflow_id} did not end within {timeout} s")
        if not waiting:  # its record is a moment behind its steps (Redis, across slots)
            await asyncio.sleep(min(SETTLE_PAUSE, left))
            continue
        with contextlib.suppress(JobFailed, JobCancelled):  # it ended: read the workflow
            await wait_result(backend, waiting[0], left)


# -- a flow as JSON: the HTTP API's, and a spawn's through an executor's pipe ----

STEP_FIELDS = frozenset({"task", "args", "queue", "delay", "run_at", "priority",
                         "max_attempts", "timeout", "may_fail", "concurrency_key"})  # fmt: skip


def flow_to_json(flow: Flow) -> Any:
    """``flow`` as ``flow_from_json`` reads it."""
    if isinstance(flow, Chain | Group):
        return {type(flow).__name__.lower(): [flow_to_json(part) for part in flow.parts]}
    spec = flow.spec
    return {"task": spec.task, "args": orjson.loads(spec.args), "queue": spec.queue,
            "delay": spec.delay, "run_at": spec.run_at, "priority": spec.priority,
            "max_attempts": spec.max_attempts, "timeout": spec.timeout,
            "may_fail": flow.may_fail, "concurrency_key": spec.concurrency_key}  # fmt: skip


def flow_from_json(
    value: Any, max_payload: int = DEFAULT_MAX_PAYLOAD, *, at: str = "flow", depth: int = 0
) -> Flow:
    """The flow a JSON value describes: ``{"chain": [...]}``, ``{"group": [...]}``
    or a step, ``{"task": name, "args": {...}, "queue": ..., "may_fail": ...}``
    (options as ``with_options`` takes them); InvalidInput saying where it is wrong."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{at}: a step, chain or group is a JSON object, got {shown(value)}")
    for kind, make in (("chain", chain), ("group", group)):
        if kind in value:
            parts = value[kind]
            if len(value) != 1 or not isinstance(parts, list):
                raise InvalidInput(f"{at}: {{{kind!r}: [...]}} takes a list and nothing else")
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{at}: chains and groups nest at most {MAX_DEPTH} deep")
            return make(*(flow_from_json(p, max_payload, at=f"{at}.{kind}[{i}]", depth=depth + 1)
                          for i, p in enumerate(parts)))  # fmt: skip
    unknown = sorted(set(value) - STEP_FIELDS)
    if unknown or "task" not in value:
        raise InvalidInput(
            f"{at}: a step takes {', '.join(sorted(STEP_FIELDS))} ('task' required); "
            f"got {', '.join(sorted(value)) or 'nothing'}"
        )
    options = {k: v for k, v in value.items() if k not in ("task", "args", "may_fail")}
    options = {k: v for k, v in options.items() if v is not None}
    may_fail = value.get("may_fail", False)
    if not isinstance(may_fail, bool):
        raise InvalidInput(f"{at}: may_fail must be true or false, got {shown(may_fail)}")
    try:
        spec = JobSpec.create(value["task"], value.get("args"), max_payload=max_payload, **options)
    except InvalidInput as exc:
        raise InvalidInput(f"{at}: {exc}") from None
    return Step(spec, may_fail)
