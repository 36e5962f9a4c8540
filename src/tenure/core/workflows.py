"""Workflows: chains and groups of steps, and the graph storage keeps of them.

Pure. A flow is built from steps (``Task.step``), ``chain`` (each part after
the previous completed) and ``group`` (the parts in parallel); they nest, so
every series-parallel graph can be written. ``compile_flow`` turns a flow into a
:class:`WorkflowSpec`: its steps in an order where each comes after the steps
it waits for, each with the indexes of those steps (its ``upstream``, in order).

What storage keeps (every backend alike; the conformance suite is the contract):

* each step is a job with ``workflow`` set; one that waits on others is
  ``waiting`` (never claimable) until each of its upstream steps ended;
* an **edge** per (upstream step, dependent), with an ordering key ``ord``
  (``edge_ord``: a dependent's ``upstream`` is its edges sorted by it) and a
  state, ``open``, ``done`` (the upstream completed, or ended dead or
  cancelled with ``may_fail``) or ``failed`` (it ended dead or cancelled
  without ``may_fail``); a dependent counts its edges not done (``pending``)
  and its edges failed (``blocked``): the fan-in is a counter, never a scan;
* the workflow's record (id, key, state, its ``sinks``: the steps whose
  results are its result, as edges to the workflow itself, counted alike).

The transitions (each in the transaction, or script, of the step's own
transition; never by a stale fence):

* a step ends ``completed`` -> each of its open edges becomes ``done``;
* a step ends ``dead`` or ``cancelled`` -> each of its open edges becomes
  ``failed``, or ``done`` when it was enqueued with ``may_fail``;
* a dead step retried from the DLQ -> each of its ``failed`` edges is ``open``
  again (``done`` ones stay: their dependents may have run);
* after any of these, a dependent that is ``waiting`` with ``blocked > 0`` is
  ``cancelled`` (``cancel_reason`` upstream_failed), which is itself a step
  ending cancelled (the cascade goes on); one so cancelled whose ``blocked`` is
  0 again is ``waiting`` again (its own edges ``open`` again, the cascade goes
  on); a ``waiting`` one whose ``pending`` and ``blocked`` are 0 is released:
  ``queued``, or ``scheduled`` when its spec has a delay (counted from the
  release) or a later ``run_at``, with a ``ready`` event;
* the workflow, counting its sink edges the same way, is ``completed`` when
  every sink edge is done, ``failed`` while one is failed, ``cancelled`` once
  cancelled by hand (then each unfinished step is cancelled, active ones
  marked ``cancel_requested``), else ``running``; a ``workflow_ended`` event
  records each end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenure.core.ids import new_job_id, new_job_ids
from tenure.core.names import check_key, shown
from tenure.core.states import DeadReason, Name
from tenure.errors import InvalidInput

if TYPE_CHECKING:
    from tenure.job import Job, JobSpec

MAX_STEPS = 100_000  # steps in one workflow (or one spawn)
MAX_DEPTH = 100  # chains and groups nested in one another
MAX_EDGES = 200_000  # edges in one workflow (or one spawn): a group after a group is n*m
ORD_WIDTH = 6  # digits of each part of an edge's ordering key
WORKFLOW_ID_PREFIX = "wf-"


class WorkflowState(Name):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # a step it needs ended dead (not may_fail); a DLQ retry resumes it
    CANCELLED = "cancelled"  # by hand: app.cancel(workflow_id)


# The states a workflow ends in: the outcomes of tenure_workflows_total.
ENDED = (WorkflowState.COMPLETED, WorkflowState.FAILED, WorkflowState.CANCELLED)


class CancelReason(Name):
    """Why a job was cancelled other than by hand (``Job.cancel_reason``)."""

    UPSTREAM_FAILED = "upstream_failed"  # a step it waits for ended dead or cancelled


class EdgeState(Name):
    OPEN = "open"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Failed:
    """A ``may_fail`` step that did not complete, as its dependents see it in
    ``current_job().upstream``: ``dead_reason`` (None when it was cancelled)
    and its last error."""

    job_id: str
    task: str
    dead_reason: DeadReason | None
    error: str | None

    @classmethod
    def of(cls, job: Job) -> Failed:
        return cls(job.id, job.task, job.dead_reason, job.error)


# -- flows: what a caller writes ------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One job of a flow, not yet stored: ``task.step(*args, **kwargs)``."""

    spec: JobSpec
    may_fail: bool = False


@dataclass(frozen=True)
class Chain:
    parts: tuple[Flow, ...]
    depth: int = 1  # how deep chains and groups nest in it, itself included


@dataclass(frozen=True)
class Group:
    parts: tuple[Flow, ...]
    depth: int = 1


Flow = Step | Chain | Group


def chain(*parts: Flow) -> Chain:
    """Each part runs after the previous one completed; the next waits for its last."""
    return Chain(_checked("chain", parts), _depth("chain", parts))


def group(*parts: Flow) -> Group:
    """The parts run in parallel; what follows the group waits for all of them."""
    return Group(_checked("group", parts), _depth("group", parts))


def _depth(what: str, parts: tuple[Flow, ...]) -> int:
    depth = 1 + max(0 if isinstance(p, Step) else p.depth for p in parts)
    if depth > MAX_DEPTH:
        raise InvalidInput(f"tenure.{what}(): chains and groups nest at most {MAX_DEPTH} deep")
    return depth


def _checked(what: str, parts: tuple[Any, ...]) -> tuple[Flow, ...]:
    if not parts:
        raise InvalidInput(f"tenure.{what}() needs at least one step")
    for part in parts:
        if not isinstance(part, Step | Chain | Group):
            hint = " (call task.step(...) to make a step of a task)" if callable(part) else ""
            raise InvalidInput(
                f"tenure.{what}() takes steps, chains and groups, got {shown(part)}{hint}"
            )
    return parts


# -- the graph: what storage keeps ------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepSpec:
    spec: JobSpec
    upstream: tuple[int, ...]  # indexes of earlier steps of the same spec, in order
    may_fail: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """A flow compiled for storage; ids are fresh, so one flow may be run twice."""

    id: str
    key: str | None
    steps: tuple[StepSpec, ...]
    sinks: tuple[int, ...]  # the steps whose results are the workflow's, in order
    many: bool  # its result is the list of the sinks' (it ends with a group)

    def edges(self) -> int:
        return sum(len(s.upstream) for s in self.steps) + len(self.sinks)


@dataclass(frozen=True)
class Workflow:
    """A workflow as storage holds it: ``jobs`` are its steps in the order they
    were written (spawned ones after), without history."""

    id: str
    state: WorkflowState
    created_at: float
    finished_at: float | None
    key: str | None
    many: bool
    sinks: tuple[str, ...]  # job ids, in result order
    jobs: tuple[Job, ...] = field(default=())

    def by_id(self) -> dict[str, Job]:
        return {job.id: job for job in self.jobs}


def new_workflow_id() -> str:
    return WORKFLOW_ID_PREFIX + new_job_id()


def is_workflow_id(value: object) -> bool:
    return isinstance(value, str) and value.startswith(WORKFLOW_ID_PREFIX)


def edge_ord(position: int, under: str = "") -> str:
    """The ordering key of a dependent's ``position``-th upstream edge; a spawn
    puts its sinks ``under`` the spawner's edge key, so they sort right after it
    (and after what the spawner spawned before): see ``spawn_ord``."""
    return f"{under}{position:0{ORD_WIDTH}d}"


def spawn_ord(spawner_ord: str, seq: int, position: int) -> str:
    """The key of an edge from the ``position``-th sink of the spawner's
    ``seq``-th spawn, to a dependent whose edge from the spawner has key
    ``spawner_ord``: ``0003`` < ``0003.000001.000000`` < ``0003.000001.000001``
    < ``0003.000002.000000`` < ``0004``."""
    return f"{spawner_ord}.{seq:0{ORD_WIDTH}d}.{position:0{ORD_WIDTH}d}"


def compile_flow(
    flow: Flow, *, key: str | None = None, workflow_id: str | None = None
) -> WorkflowSpec:
    """The graph of ``flow``, each step with a fresh job id."""
    if not isinstance(flow, Step | Chain | Group):
        _checked("workflow", (flow,))
    check_key(key)
    steps: list[StepSpec] = []

    def place(part: Flow, after: tuple[int, ...]) -> tuple[int, ...]:
        if isinstance(part, Step):
            if part.spec.key is not None:
                raise InvalidInput(
                    f"step of task {part.spec.task!r} has key={part.spec.key!r}: a workflow's "
                    "steps take no key; give the workflow one (app.workflow(flow, key=...))"
                )
            steps.append(StepSpec(part.spec, after, part.may_fail))
            if len(steps) > MAX_STEPS:
                raise InvalidInput(f"a workflow has at most {MAX_STEPS} steps")
            return (len(steps) - 1,)
        if isinstance(part, Chain):
            for inner in part.parts:
                after = place(inner, after)
            return after
        sinks: list[int] = []  # not a tuple grown: a group of n would copy n*n/2
        for inner in part.parts:
            sinks += place(inner, after)
        return tuple(sinks)

    sinks = place(flow, ())
    ids = new_job_ids(len(steps))
    fresh = tuple(StepSpec(_with_id(s.spec, i), s.upstream, s.may_fail)
                  for s, i in zip(steps, ids, strict=True))  # fmt: skip
    spec = WorkflowSpec(workflow_id or new_workflow_id(), key, fresh, sinks, _ends_many(flow))
    if spec.edges() > MAX_EDGES:
        raise InvalidInput(
            f"this workflow has {spec.edges()} edges (a group after a group of n and m "
            f"steps makes n*m), more than {MAX_EDGES}: put one step between them"
        )
    return spec


def _with_id(spec: JobSpec, job_id: str) -> JobSpec:
    """A copy of the (valid, frozen) spec with another id: a copy of its fields,
    not ``dataclasses.replace``, which calls its ``__init__`` again."""
    copy = object.__new__(type(spec))
    copy.__dict__.update(spec.__dict__, id=job_id)
    return copy


def _ends_many(flow: Flow) -> bool:
    while isinstance(flow, Chain):
        flow = flow.parts[-1]
    return isinstance(flow, Group)


def result_of(workflow: Workflow, results: Sequence[Any]) -> Any:
    """The workflow's result from its sinks' results, in order."""
    return list(results) if workflow.many or len(results) != 1 else results[0]
