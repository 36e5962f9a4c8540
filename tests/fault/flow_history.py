"""The history checker's workflow rules (``history.py`` calls them).

The driver writes each workflow it asked for (``workflows.jsonl``: its id if
acknowledged, each step's tag, the tags of the steps it waits on, in order,
whether it may fail and whether it is the fan-in callback), and each cancel
of one it asked for (``cancels.jsonl``, with the state it answered); its
steps are also requests of their own (``requests.jsonl``), so every rule
about jobs holds for them too. Storage adds each step's job (``workflow``, ``upstream``,
``may_fail``, ``cancel_reason``) and each workflow's record.

The rules, each a must-be-zero row:

- no step starts before every step it waits on completed: its first start
  (side channel) is not earlier than the "ok" end of the completing attempt of
  each of them (or, for one that may fail and did not complete, than the
  moment storage ended it); a step waiting on one that failed never starts;
- each step completes at most once: one completed attempt in storage, and no
  second handler returning "ok" unless a fault explains why the first one's
  completion was lost;
- every workflow ends ``completed``, ``failed`` or ``cancelled`` (none stuck),
  and the end its steps say: completed when every last step completed (or may
  fail), failed when one of them failed; a flow asked to fail never completes;
  a workflow is cancelled only if asked, and is once a cancel answered so;
  a step is cancelled only because a step it waits on failed, or its
  workflow was asked to cancel;
- a fan-in callback starts once, but for restarts a fault explains (as the
  checker already judges duplicates: ``Checker.explain``); it is handed the
  result of each step it waits on, in their order, from its completed attempt.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tenure.core.states import Outcome, State
from tenure.core.workflows import CancelReason, Workflow, WorkflowState
from tenure.errors import JobNotFound

if TYPE_CHECKING:
    from tenure.job import Job
    from tests.fault.history import Checker, Execution, Row, Run

SLACK = 0.1  # as history.SLACK: one clock read at two moments

WF_EARLY = "workflow steps started before their upstream completed"
WF_TWICE = "workflow steps completed twice"
WF_STUCK = "workflows stuck (not completed, failed or cancelled)"
WF_WRONG = "workflows ended other than their steps say"
WF_FANIN = "fan-in callbacks started more than once, unexplained"
WF_UPSTREAM = "steps handed the wrong upstream"
WF_MUST_BE_ZERO = (WF_EARLY, WF_TWICE, WF_STUCK, WF_WRONG, WF_FANIN, WF_UPSTREAM)


@dataclass(frozen=True)
class StepRequest:
    """One step as the driver wrote it: ``upstream`` are tags, in order."""

    tag: str
    kind: str  # ok | flaky | fail, as a Request's
    upstream: tuple[str, ...] = ()
    may_fail: bool = False
    fanin: bool = False


@dataclass(frozen=True)
class WorkflowRequest:
    """One ``app.workflow`` call: ``id`` is None unless acknowledged."""

    id: str | None
    called_mono: float
    steps: tuple[StepRequest, ...]
    acked_wall: float | None = None

    @property
    def meant_to_fail(self) -> bool:
        return any(s.kind == "fail" and not s.may_fail for s in self.steps)

    @classmethod
    def of(cls, line: dict[str, Any]) -> WorkflowRequest:
        steps = tuple(StepRequest(**{**s, "upstream": tuple(s.get("upstream", ()))})
                      for s in line["steps"])  # fmt: skip
        return cls(line["id"], line["called_mono"], steps, line.get("acked_wall"))


@dataclass(frozen=True)
class CancelRequest:
    """One ``app.cancel(workflow_id)``: ``state`` is what it answered (the
    workflow's, ``cancelled`` unless it had ended), None if no answer came."""

    id: str
    called_mono: float
    state: str | None = None


class FlowRules:
    """The workflow rules over one run; findings go to the checker's."""

    def __init__(self, checker: Checker) -> None:
        self.flows, self.jobs = checker.run.workflows, checker.jobs
        self.stored, self.runs = checker.workflows, checker.runs
        self.explain, self.f = checker.explain, checker.f
        self.offset = checker.run.wall_minus_mono
        self.cancels: dict[str, list[CancelRequest]] = defaultdict(list)
        for c in checker.run.cancels:
            self.cancels[c.id].append(c)
        self.seen: dict[str, list[tuple[int, list[int | None]]]] = defaultdict(list)
        for (job_id, fence), fences in sorted(checker.run.handed.items()):
            self.seen[job_id].append((fence, fences))
        self.by_tag = {str(j.args.get("tag")): j for j in self.jobs.values()}
        self.mine: dict[str, list[tuple[int, Execution]]] = defaultdict(list)
        for (job_id, fence), x in sorted(self.runs.items(), key=lambda kv: kv[0]):
            self.mine[job_id].append((fence, x))

    def rows(self, row: Callable[[str], Row], plain: Callable[[str, float], Row]) -> list[Row]:
        """Every workflow rule's row, then a few counts (``row`` makes a
        must-be-zero row of the findings, ``plain`` an informative one)."""
        ended: Counter[str] = Counter()
        for flow in self.flows:
            self._flow(flow, ended)
        steps = [j for j in self.jobs.values() if j.workflow is not None]
        for job in steps:
            self._step(job)
        self._as_asked()
        upstream_failed = sum(j.cancel_reason is CancelReason.UPSTREAM_FAILED for j in steps)
        counts = [plain("workflows asked for", len(self.flows)),
                  plain("  acknowledged", sum(f.id is not None for f in self.flows)),
                  plain("  ended completed", ended[WorkflowState.COMPLETED]),
                  plain("  ended failed", ended[WorkflowState.FAILED]),
                  plain("  ended cancelled", ended[WorkflowState.CANCELLED]),
                  plain("  asked to cancel", len(self.cancels)),
                  plain("workflow steps", len(steps)),
                  plain("  cancelled, upstream failed", upstream_failed)]  # fmt: skip
        return [row(name) for name in WF_MUST_BE_ZERO] + counts

    # -- a workflow: its end ----------------------------------------------------

    def _flow(self, flow: WorkflowRequest, ended: Counter[str]) -> None:
        stored_steps = [self.by_tag[s.tag] for s in flow.steps if s.tag in self.by_tag]
        wf_id = flow.id or next((j.workflow for j in stored_steps if j.workflow), None)
        if wf_id is None:
            return  # neither acknowledged nor stored: nothing was asked of storage
        record = self.stored.get(wf_id)
        if record is None:
            self.f.add(WF_STUCK, wf_id, "its record is not in storage")
            return
        if record.state is WorkflowState.RUNNING:
            states = [f"{s.tag}:{self.by_tag[s.tag].state}" for s in flow.steps
                      if s.tag in self.by_tag]  # fmt: skip
            self.f.add(WF_STUCK, wf_id, f"running at the end; steps {states}")
            return
        ended[record.state] += 1
        self._cancelled(wf_id, record)
        said = self._said(record)
        if record.state is not WorkflowState.CANCELLED and said is not record.state:
            self.f.add(WF_WRONG, wf_id, f"{record.state}, its last steps say {said}")
        if record.state is WorkflowState.COMPLETED and flow.meant_to_fail:
            self.f.add(WF_WRONG, wf_id, "completed, though a step of it fails for good")

    def _cancelled(self, wf_id: str, record: Workflow) -> None:
        asked = self.cancels.get(wf_id, [])
        cancelled = record.state is WorkflowState.CANCELLED
        if cancelled and not asked:
            self.f.add(WF_WRONG, wf_id, "cancelled, though nobody asked")
        if not cancelled and any(c.state == WorkflowState.CANCELLED for c in asked):
            self.f.add(WF_WRONG, wf_id, f"{record.state}, though a cancel answered cancelled")

    def _said(self, record: Workflow) -> WorkflowState:
        """The end the workflow's last steps (its sinks) make of it."""
        sinks = [self.jobs.get(i) for i in record.sinks]
        if any(j is not None and _failed(j) for j in sinks):
            return WorkflowState.FAILED
        if all(j is not None and _done(j) for j in sinks):
            return WorkflowState.COMPLETED
        return WorkflowState.RUNNING

    # -- a step: when it ran, how often, what it was handed ---------------------

    def _step(self, job: Job) -> None:
        ups = [self.jobs.get(i) for i in job.upstream]
        mine = self.mine.get(job.id, [])
        if mine:
            first = min(x.start for _, x in mine)
            early = [why for up_id, up in zip(job.upstream, ups, strict=True)
                     if (why := self._early(first, up_id, up))]  # fmt: skip
            if early:  # one finding per step, however many upstream it ran ahead of
                self.f.add(WF_EARLY, job.id, "; ".join(early))
        if job.state is State.CANCELLED and not self._may_cancel(job, ups):
            self.f.add(WF_WRONG, job.id, f"cancelled ({job.cancel_reason}), no upstream "
                       "failed, its workflow not asked to cancel")  # fmt: skip
        self._twice(job, mine)
        if len(job.upstream) > 1:
            self._fanin(job, mine)
        for fence, fences in self.seen.get(job.id, []):
            self._handed(job, fence, fences, ups)

    def _may_cancel(self, job: Job, ups: list[Job | None]) -> bool:
        """Whether ``job`` has a reason to be cancelled: its workflow was asked
        to cancel, or (so it says) a step it waits on failed."""
        if job.workflow in self.cancels:
            return True
        upstream_failed = any(u is not None and _failed(u) for u in ups)
        return job.cancel_reason is CancelReason.UPSTREAM_FAILED and upstream_failed

    def _early(self, first: float, up_id: str, up: Job | None) -> str | None:
        """How a step first started at ``first`` ran ahead of its upstream ``up``, if it did."""
        if up is not None and up.state is State.COMPLETED:
            done = [a for a in up.history if a.outcome is Outcome.COMPLETED]
            x = self.runs.get((up.id, done[-1].fence)) if done else None
            ended = x.end.mono if x is not None and x.end is not None else self._mono(up)
        elif up is not None and _done(up):  # may fail, and did not complete
            ended = self._mono(up)
        else:
            return f"started though upstream {up_id} is {'gone' if up is None else up.state}"
        if ended is not None and first < ended - SLACK:
            return f"started {ended - first:.3f} s before upstream {up_id} ended"
        return None

    def _mono(self, job: Job) -> float | None:
        """When storage ended ``job``, on the handlers' clock."""
        if job.finished_at is None or self.offset is None:
            return None
        return job.finished_at - self.offset

    def _twice(self, job: Job, mine: list[tuple[int, Execution]]) -> None:
        done = [a.fence for a in job.history if a.outcome is Outcome.COMPLETED]
        if len(done) > 1:
            self.f.add(WF_TWICE, job.id, f"{len(done)} completed attempts, fences {done}")
            return
        ok = [f for f, x in mine if x.end is not None and x.end.how == "ok"]
        lost = [f for f in ok if f not in done and not self._explained(job, f)]
        if len(ok) > 1 and lost:
            self.f.add(WF_TWICE, job.id, f"handlers of fences {ok} returned ok; completed "
                       f"{done}, {lost} not explained by a fault")  # fmt: skip

    def _fanin(self, job: Job, mine: list[tuple[int, Execution]]) -> None:
        again = [f for f, _ in mine[:-1] if not self._explained(job, f)]
        if again:
            self.f.add(WF_FANIN, job.id, f"started at fences {[f for f, _ in mine]}; "
                       f"fences {again} ended unexplained")  # fmt: skip

    def _explained(self, job: Job, fence: int) -> bool:
        a = next((a for a in job.history if a.fence == fence), None)
        return a is not None and self.explain(job, a) is not None

    def _handed(self, job: Job, fence: int, fences: list[int | None],
                ups: list[Job | None]) -> None:  # fmt: skip
        want = [_completed_fence(u) for u in ups]
        if fences != want:
            self.f.add(WF_UPSTREAM, job.id, f"fence {fence} was handed fences {fences} of its "
                       f"upstream, which completed at {want}")  # fmt: skip

    def _as_asked(self) -> None:
        """Each stored step waits on the steps its flow says, in that order."""
        for flow in self.flows:
            for s in flow.steps:
                job = self.by_tag.get(s.tag)
                if job is None:
                    continue
                got = tuple(str(self.jobs[i].args.get("tag")) if i in self.jobs else i
                            for i in job.upstream)  # fmt: skip
                if got != s.upstream:
                    self.f.add(WF_UPSTREAM, job.id, f"waits on {list(got)}, its flow says "
                               f"{list(s.upstream)}")  # fmt: skip


def _failed(job: Job) -> bool:
    """It ended so that what waits on it fails too."""
    return job.state in (State.DEAD, State.CANCELLED) and not job.may_fail


def _done(job: Job) -> bool:
    """It ended so that what waits on it may run."""
    return job.state is State.COMPLETED or (
        job.state in (State.DEAD, State.CANCELLED) and job.may_fail
    )


def _completed_fence(job: Job | None) -> int | None:
    """The fence in the result a dependent is handed (None: a Failed)."""
    if job is None or job.state is not State.COMPLETED:
        return None
    return next((a.fence for a in reversed(job.history) if a.outcome is Outcome.COMPLETED), None)


# -- what storage held: the workflows' records -----------------------------------


def stored_workflows(app: Any, ids: Iterable[str]) -> dict[str, Workflow]:
    """The record of each workflow of ``ids`` that storage holds (without its jobs)."""
    found = {}
    for wf_id in ids:
        try:
            workflow = app.get_workflow(wf_id)
        except JobNotFound:
            continue
        found[wf_id] = Workflow(workflow.id, workflow.state, workflow.created_at,
                                workflow.finished_at, workflow.key, workflow.many,
                                workflow.sinks)  # fmt: skip
    return found


def workflow_ids(run: Run, jobs: dict[str, Job]) -> set[str]:
    """The run's workflows: those acknowledged, and those its stored steps name."""
    acked = {w.id for w in run.workflows if w.id is not None}
    return acked | {j.workflow for j in jobs.values() if j.workflow is not None}


def dump_workflows(workflows: dict[str, Workflow], path: Path) -> None:
    with path.open("wb") as f:
        for workflow in workflows.values():
            f.write(orjson.dumps(asdict(workflow)) + b"\n")


def load_workflows(path: Path) -> dict[str, Workflow]:
    found = {}
    for raw in path.read_bytes().splitlines():
        d = orjson.loads(raw)
        d.update(state=WorkflowState(d["state"]), sinks=tuple(d["sinks"]), jobs=())
        found[d["id"]] = Workflow(**d)
    return found
