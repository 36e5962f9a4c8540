"""The history checker: what became of every job of a run, judged from two
sides that cannot fool each other.

- What happened, written outside tenure: the driver's requests
  (``requests.jsonl``: every enqueue call, acknowledged or not; and
  ``workflows.jsonl``: every workflow, its steps also requests), the handlers'
  side channel (``events.<pid>.jsonl``: start, tick, end of each execution,
  see ``soak_tasks.py``) and the nemesis's faults (``faults.jsonl``).
- What storage holds, read through the public API: every job of the run's
  queues with its attempt history, and the record of every workflow.

:func:`check` turns both into :class:`Row`s; a run is green only when every
must-be-zero row is zero. Run it on a kept run directory with
``python -m tests.fault.history RUN_DIR`` (it reads ``jobs.jsonl``, what
storage held at the end, and ``stored_workflows.jsonl``, or else storage at
the URL in ``manifest.json``); it exits 1 when a must-be-zero row is not zero.
The workflow rules: ``flow_history.py``; the per-key rule: ``key_history.py``.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import CancelReason, Workflow
from tenure.job import Attempt, Job
from tests.fault.flow_history import (
    CancelRequest,
    FlowRules,
    WorkflowRequest,
    load_workflows,
    stored_workflows,
    workflow_ids,
)
from tests.fault.key_history import KeyRules

SLACK = 0.1  # seconds between clocks that are the same clock read at different moments
# Storage's stamps and a worker's acts are this far apart on a loaded server: a
# recovery is stamped with its transaction's start (PostgreSQL now()), before the
# sweep looked at the worker; a claim sent just before its worker was killed is
# run (and stamped) after the kill.
TX_SLACK = 1.0
EARLY = 0.05  # a delayed job may start this much before its delay (float rounding)
# A fault explains only the ends recorded this soon after it is over: with the
# soak's leases (2 s) every detector answers within a few seconds.
RECOVERY_BOUND = 10.0

# What a fault can explain: an attempt ended this way on its target is not a false stall.
# A short SIGSTOP and a skewed clock explain nothing: under them, nothing may change.
EXPLAINS: dict[str, frozenset[Outcome]] = {
    "kill-worker": frozenset({Outcome.CRASHED, Outcome.STALLED}),
    "kill-executor": frozenset({Outcome.CRASHED, Outcome.RELEASED}),
    "stop-long": frozenset({Outcome.CRASHED, Outcome.STALLED, Outcome.RELEASED}),
    "partition": frozenset({Outcome.CRASHED, Outcome.STALLED, Outcome.RELEASED}),
    "term": frozenset({Outcome.CRASHED, Outcome.RELEASED}),
    "kill-server": frozenset({Outcome.CRASHED, Outcome.STALLED}),
}


@dataclass(frozen=True)
class Request:
    """One job the driver asked for: ``job_id`` is None unless acknowledged."""

    tag: str
    kind: str  # ok | flaky | raise | fail
    queue: str
    job_id: str | None
    called_mono: float
    acked_wall: float | None = None
    delay: float = 0.0
    key: str | None = None
    bulk: bool = False
    concurrency_key: str | None = None


@dataclass(frozen=True)
class Event:
    """One side-channel line of a handler."""

    ev: str  # start | tick | end
    job: str
    fence: int
    pid: int
    mono: float
    tag: str | None = None
    how: str | None = None  # end: ok | raised | fail


@dataclass(frozen=True)
class Fault:
    """One fault the nemesis did, on worker ``worker_pid`` (its processes ``pids``)
    or on the server (``worker_pid`` None), from ``started`` to ``ended`` (wall)."""

    kind: str
    started: float
    ended: float
    worker_pid: int | None = None
    pids: tuple[int, ...] = ()


@dataclass
class Run:
    """Everything recorded outside tenure about one run."""

    requests: list[Request] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    deliveries: dict[str, str] = field(default_factory=dict)  # queue -> delivery
    key_limits: dict[str, int] = field(default_factory=dict)  # queue -> max_active_per_key
    unreadable: int = 0  # side-channel lines cut short (a process killed mid-write)
    wall_minus_mono: float | None = None  # the machine's clocks, to place handlers' ends
    workflows: list[WorkflowRequest] = field(default_factory=list)
    cancels: list[CancelRequest] = field(default_factory=list)
    # What each fan-in attempt, (job, fence), was handed: its upstream results' fences.
    handed: dict[tuple[str, int], list[int | None]] = field(default_factory=dict)


@dataclass
class Row:
    name: str
    value: float
    must_be_zero: bool = False
    examples: list[str] = field(default_factory=list)
    unit: str = ""

    @property
    def failed(self) -> bool:
        return self.must_be_zero and self.value != 0


@dataclass
class Report:
    rows: list[Row]

    def as_dict(self) -> dict[str, float]:
        return {r.name: r.value for r in self.rows}

    def violations(self, names: Iterable[str] | None = None) -> list[Row]:
        wanted = None if names is None else set(names)
        return [r for r in self.rows if r.failed and (wanted is None or r.name in wanted)]

    def table(self) -> str:
        width = max(len(r.name) for r in self.rows)
        lines = [f"{'row':<{width}}  {'value':>10}  must be 0"]
        for r in self.rows:
            value = f"{r.value:.3f}{r.unit}" if r.unit else f"{int(r.value)}"
            mark = ("FAIL" if r.failed else "ok") if r.must_be_zero else ""
            lines.append(f"{r.name:<{width}}  {value:>10}  {mark}".rstrip())
            lines.extend(f"{'':<{width}}    {e}" for e in r.examples[:5])
        return "\n".join(lines)


class Findings:
    """Findings per row, each with a few words on the job it concerns."""

    def __init__(self) -> None:
        self.by_row: dict[str, list[str]] = defaultdict(list)

    def add(self, row: str, job_id: str, detail: str) -> None:
        self.by_row[row].append(f"{job_id}: {detail}")

    def row(self, name: str) -> Row:
        found = self.by_row.get(name, [])
        return Row(name, len(found), must_be_zero=True, examples=found)


LOST = "lost (acknowledged, not in storage)"
UNFINISHED = "unfinished at the end"
UNEXPECTED = "unexpected (ran, never requested)"
WRONG_END = "final state wrong for its kind"
GHOST = "completed without a handler returning"
DUPLICATE = "duplicate completions"
REDELIVERED = "redelivered after completion"
STALE = "stale settles accepted"
SAME_FENCE = "same fence started twice"
OVERLAP = "overlapping executions not explained by a fault"
AMO_TWICE = "at-most-once double starts"
HEALTHY = "healthy attempts recorded crashed/stalled"
SETTLE_LAG = "attempts settled long after their handler returned"
EARLY_START = "delayed jobs started early"
KEY_DUPLICATE = "key= duplicates"
MUST_BE_ZERO = (LOST, UNFINISHED, UNEXPECTED, WRONG_END, GHOST, DUPLICATE, REDELIVERED, STALE,
                SAME_FENCE, OVERLAP, AMO_TWICE, HEALTHY, SETTLE_LAG, EARLY_START,
                KEY_DUPLICATE)  # fmt: skip


def worker_pid(worker_id: str | None) -> int | None:
    """The pid in a worker id (``host.pid.random``)."""
    parts = (worker_id or "").rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


@dataclass
class Execution:
    """One handler execution, from the side channel: (job, fence)."""

    pid: int
    start: float
    last: float  # its end, or the last sign of life of one that never ended
    end: Event | None = None
    starts: int = 1


def executions(events: Iterable[Event]) -> dict[tuple[str, int], Execution]:
    found: dict[tuple[str, int], Execution] = {}
    for e in sorted(events, key=lambda e: e.mono):
        x = found.get((e.job, e.fence))
        if e.ev == "start":
            if x is None:
                found[(e.job, e.fence)] = Execution(e.pid, e.mono, e.mono)
            else:
                x.starts += 1
        elif x is not None:
            x.last = max(x.last, e.mono)
            if e.ev == "end":
                x.end = e
    return found


class Checker:
    def __init__(self, run: Run, jobs: dict[str, Job],
                 workflows: dict[str, Workflow] | None = None) -> None:  # fmt: skip
        self.run, self.jobs, self.workflows = run, jobs, workflows or {}
        self.runs = executions(run.events)
        self.f = Findings()
        self.recoveries: dict[str, list[float]] = defaultdict(list)
        self.explained: dict[tuple[str, int], Fault | None] = {}

    def explain(self, job: Job, a: Attempt) -> Fault | None:
        """The fault that explains how attempt ``a`` ended, if any."""
        key = (job.id, a.fence)
        if key not in self.explained:
            self.explained[key] = self._explain(job, a)
        return self.explained[key]

    def _explain(self, job: Job, a: Attempt) -> Fault | None:
        if a.outcome is None or a.ended_at is None:
            return None
        wpid = worker_pid(a.worker)
        x = self.runs.get((job.id, a.fence))
        for fault in self.run.faults:
            if a.outcome not in EXPLAINS.get(fault.kind, frozenset()):
                continue
            if not fault.started <= a.ended_at + TX_SLACK <= fault.ended + RECOVERY_BOUND:
                continue  # recorded before the fault began, or long after it
            if fault.worker_pid is None:  # the server: what it held when it died
                if a.started_at <= fault.started + SLACK:
                    return fault
                continue
            if a.started_at > fault.ended + TX_SLACK:
                continue  # claimed after the fault was over (a claim sent before it may land late)
            if fault.kind == "kill-executor":
                hit = (x.pid in fault.pids) if x else wpid == fault.worker_pid
            else:
                hit = wpid == fault.worker_pid or (x is not None and x.pid in fault.pids)
            if hit:
                return fault
        return None

    def report(self) -> Report:
        rows = self._counts()
        self._requests()
        for job in self.jobs.values():
            self._job(job)
        self._unexpected()
        self._keys()
        rows += [self.f.row(name) for name in MUST_BE_ZERO]
        rows += FlowRules(self).rows(self.f.row, Row)
        rows += KeyRules(self).rows(self.f.row, Row)
        for kind, count in sorted(Counter(f.kind for f in self.run.faults).items()):
            rows.append(Row(f"faults: {kind}", count))
            if kind in ("term", "kill-server"):  # how long the drain, or the outage, took
                took = [f.ended - f.started for f in self.run.faults if f.kind == kind]
                rows.append(Row(f"  {kind} lasted, max", max(took), unit=" s"))
            took = self.recoveries.get(kind)
            if took:
                rows.append(Row(f"  recovery after {kind}, median", statistics.median(took),
                                unit=" s"))  # fmt: skip
                rows.append(Row(f"  recovery after {kind}, max", max(took), unit=" s"))
        if self.run.unreadable:
            rows.append(Row("side-channel lines cut short", self.run.unreadable))
        return Report(rows)

    def _counts(self) -> list[Row]:
        reqs = self.run.requests
        acked = [r for r in reqs if r.job_id is not None]
        states = Counter(j.state for j in self.jobs.values())
        reasons = Counter(str(j.dead_reason) for j in self.jobs.values() if j.state is State.DEAD)
        stored_unacked = {r.tag for r in reqs if r.job_id is None} & {
            str(j.args.get("tag")) for j in self.jobs.values()
        }
        rows = [Row("enqueue calls (jobs)", len(reqs)),
                Row("  acknowledged", len(acked)),
                Row("  of them bulk", sum(r.bulk for r in acked)),
                Row("  not acknowledged, stored anyway", len(stored_unacked)),
                Row("handler executions", len(self.runs)),
                Row("completed", states[State.COMPLETED]),
                Row("dead", states[State.DEAD])]  # fmt: skip
        rows += [Row(f"  dead: {reason}", n) for reason, n in sorted(reasons.items())]
        return rows

    def _requests(self) -> None:
        first_start: dict[str, float] = {}
        for (job_id, _), x in self.runs.items():
            first_start[job_id] = min(x.start, first_start.get(job_id, x.start))
        for r in self.run.requests:
            if r.job_id is None:
                continue
            if r.job_id not in self.jobs:
                self.f.add(LOST, r.job_id, f"{r.kind} job {r.tag}, acknowledged at {r.acked_wall}")
            started = first_start.get(r.job_id)
            if r.delay > 0 and started is not None and started < r.called_mono + r.delay - EARLY:
                early = r.called_mono + r.delay - started
                self.f.add(EARLY_START, r.job_id, f"started {early:.3f} s before its delay")

    def _job(self, job: Job) -> None:
        kind = str(job.args.get("kind"))
        delivery = self.run.deliveries.get(job.queue, "at-least-once")
        if job.state not in (State.COMPLETED, State.DEAD, State.CANCELLED):
            self.f.add(UNFINISHED, job.id, f"{job.state}, history {_outcomes(job)}")
        self._final_state(job, kind, delivery)
        mine = sorted((f, x) for (j, f), x in self.runs.items() if j == job.id)
        for fence, x in mine:
            if x.starts > 1:
                self.f.add(SAME_FENCE, job.id, f"fence {fence} started {x.starts} times")
        # A released attempt of an at-most-once job never began (one that began
        # and was stopped is dead, never released): it delivered nothing.
        delivered = [a for a in job.history if a.outcome is not Outcome.RELEASED]
        if delivery == "at-most-once" and (len(mine) > 1 or len(delivered) > 1):
            self.f.add(AMO_TWICE, job.id, f"{len(mine)} starts, history {_outcomes(job)}")
        fences = Counter(a.fence for a in job.history)
        for fence, n in fences.items():
            if n > 1:
                self.f.add(STALE, job.id, f"{n} history rows for fence {fence}")
        self._attempts(job, mine)
        self._completion(job, mine)

    def _final_state(self, job: Job, kind: str, delivery: str) -> None:
        if job.state is State.DEAD and str(job.dead_reason) in ("crashed", "stalled"):
            return  # a budget of stalls ran out; unexplained stalls are counted apart
        wanted = {
            "ok": (State.COMPLETED, None),
            "flaky": (State.COMPLETED, None) if delivery == "at-least-once"
            else (State.DEAD, "max_attempts"),
            "raise": (State.DEAD, "max_attempts"),
            "fail": (State.DEAD, "error"),
        }.get(kind)  # fmt: skip
        if wanted is None or job.state not in (State.COMPLETED, State.DEAD):
            return
        got = (job.state, None if job.dead_reason is None else str(job.dead_reason))
        if got != wanted:
            error = (job.error or "").strip().rsplit("\n", 1)[-1][:200]
            self.f.add(WRONG_END, job.id, f"{kind} job ended {got[0]} ({got[1]}), history "
                       f"{_outcomes(job)}, error {error!r}")  # fmt: skip

    def _attempts(self, job: Job, mine: list[tuple[int, Execution]]) -> None:
        for a in job.history:
            fault = self.explain(job, a)
            if a.outcome in (Outcome.CRASHED, Outcome.STALLED) and fault is None:
                x = self.runs.get((job.id, a.fence))
                ran = f", handler pid {x.pid} ran {x.last - x.start:.2f} s" if x else ""
                at = f"at {a.ended_at:.3f}, claimed {a.started_at:.3f}{ran}"
                self.f.add(HEALTHY, job.id, f"fence {a.fence} on {a.worker} {a.outcome} {at}")
            if fault is not None and a.ended_at is not None:
                self.recoveries[fault.kind].append(max(0.0, a.ended_at - fault.started))
            self._settled_in_time(job, a)
        for i, (f1, x1) in enumerate(mine):
            for f2, x2 in mine[i + 1 :]:
                if x2.start >= x1.last:
                    continue
                earlier = next((a for a in job.history if a.fence == f1), None)
                if earlier is None or self.explain(job, earlier) is None:
                    outcome = earlier.outcome if earlier else "no history row"
                    self.f.add(OVERLAP, job.id, f"fence {f2} started {x1.last - x2.start:.2f} s "
                               f"before fence {f1} ({outcome}) stopped")  # fmt: skip

    def _settled_in_time(self, job: Job, a: Attempt) -> None:
        """An attempt whose handler returned is settled at once, or recovered at
        lease expiry; not left held (and heartbeated) long after."""
        x = self.runs.get((job.id, a.fence))
        offset = self.run.wall_minus_mono
        if x is None or x.end is None or offset is None:
            return
        returned = x.end.mono + offset
        settled = a.ended_at if a.ended_at is not None else float("inf")
        if settled - returned > RECOVERY_BOUND:
            self.f.add(SETTLE_LAG, job.id, f"fence {a.fence} on {a.worker} returned at "
                       f"{returned:.3f}, recorded {a.outcome} at {settled:.3f}")  # fmt: skip

    def _completion(self, job: Job, mine: list[tuple[int, Execution]]) -> None:
        done = [a for a in job.history if a.outcome is Outcome.COMPLETED]
        if len(done) > 1:
            self.f.add(DUPLICATE, job.id, f"{len(done)} completed attempts: {_outcomes(job)}")
        for a in job.history:
            if a.outcome not in (Outcome.COMPLETED, Outcome.ERROR):
                continue
            x = self.runs.get((job.id, a.fence))
            later = [y.start for f, y in mine if f > a.fence]
            if x is not None and x.end is not None and later and min(later) < x.end.mono:
                self.f.add(STALE, job.id, f"fence {a.fence} settled {a.outcome} though a later "
                           "fence started before its handler ended")  # fmt: skip
        if job.state is not State.COMPLETED or not done:
            return
        for a in done:
            x = self.runs.get((job.id, a.fence))
            if x is None or x.end is None or x.end.how != "ok":
                self.f.add(GHOST, job.id, f"fence {a.fence} completed, no handler returned")
        fence = job.result.get("fence") if isinstance(job.result, dict) else None
        if fence != done[-1].fence:
            self.f.add(STALE, job.id, f"result of fence {fence} stored for fence {done[-1].fence}")
        first = done[0].fence
        after = {a.fence for a in job.history} | {f for f, _ in mine}
        after = {f for f in after if f > first}
        if after:
            self.f.add(REDELIVERED, job.id, f"fences {sorted(after)} after {first}")

    def _unexpected(self) -> None:
        asked = {r.tag for r in self.run.requests}
        for e in self.run.events:
            if e.ev == "start" and e.tag not in asked and e.job not in self.jobs:
                self.f.add(UNEXPECTED, e.job, f"tag {e.tag} ran in pid {e.pid}")

    def _keys(self) -> None:
        keyed: dict[tuple[str, str], list[Job]] = defaultdict(list)
        for job in self.jobs.values():
            if job.key is not None:
                keyed[(job.queue, job.key)].append(job)
        for (_, key), same in keyed.items():
            same.sort(key=lambda j: j.created_at)
            for prev, nxt in itertools.pairwise(same):
                if prev.finished_at is None or nxt.created_at < prev.finished_at - SLACK:
                    self.f.add(KEY_DUPLICATE, nxt.id, f"key {key} also held by {prev.id}")


def _outcomes(job: Job) -> list[str]:
    return [f"{a.fence}:{a.outcome}" for a in job.history]


def check(run: Run, jobs: dict[str, Job], workflows: dict[str, Workflow] | None = None) -> Report:
    """The table of one run, from what was recorded outside tenure and what
    storage holds (``jobs``: every job of the run's queues, with history;
    ``workflows``: the run's workflows' records, by id)."""
    return Checker(run, jobs, workflows).report()


# -- reading a run directory and storage ------------------------------------


def load(directory: Path) -> Run:
    """What the driver, the handlers and the nemesis wrote in ``directory``."""
    run = Run()
    manifest = orjson.loads((directory / "manifest.json").read_bytes())
    run.deliveries = dict(manifest["deliveries"])
    run.key_limits = dict(manifest.get("key_limits", {}))
    run.wall_minus_mono = manifest.get("wall_minus_mono")
    for line in _lines(directory / "requests.jsonl", run):
        run.requests.append(Request(**line))
    for line in _lines(directory / "faults.jsonl", run):
        run.faults.append(Fault(**{**line, "pids": tuple(line.get("pids", ()))}))
    for line in _lines(directory / "workflows.jsonl", run):
        run.workflows.append(WorkflowRequest.of(line))
    for line in _lines(directory / "cancels.jsonl", run):
        run.cancels.append(CancelRequest(**line))
    for path in sorted(directory.glob("events.*.jsonl")):
        for line in _lines(path, run):
            if line["ev"] == "upstream":
                run.handed[(line["job"], line["fence"])] = line["fences"]
            run.events.append(Event(ev=line["ev"], job=line["job"], fence=line["fence"],
                                    pid=line["pid"], mono=line["mono"], tag=line.get("tag"),
                                    how=line.get("how")))  # fmt: skip
    return run


def _lines(path: Path, run: Run) -> Iterable[dict[str, Any]]:
    if not path.exists():
        return
    for raw in path.read_bytes().splitlines():
        try:
            yield orjson.loads(raw)
        except orjson.JSONDecodeError:
            run.unreadable += 1


def stored_jobs(app: Any, queues: Iterable[str]) -> dict[str, Job]:
    """Every job of ``queues``, with its history, through the public API."""
    jobs: dict[str, Job] = {}
    for queue in queues:
        after = None
        while True:
            page = app.jobs(queue, limit=1000, after=after)
            for listed in page.jobs:
                jobs[listed.id] = app.get_job(listed.id)
            after = page.next_cursor
            if not after or not page.jobs:
                break
    return jobs


def dump_jobs(jobs: dict[str, Job], path: Path) -> None:
    """Keep what storage held, so that the run can be judged again without it."""
    with path.open("wb") as f:
        for job in jobs.values():
            f.write(orjson.dumps(asdict(job)) + b"\n")


def load_jobs(path: Path) -> dict[str, Job]:
    jobs = {}
    for raw in path.read_bytes().splitlines():
        d = orjson.loads(raw)
        d["state"] = State(d["state"])
        d["dead_reason"] = None if d["dead_reason"] is None else DeadReason(d["dead_reason"])
        reason = d.get("cancel_reason")
        d["cancel_reason"] = None if reason is None else CancelReason(reason)
        d["upstream"] = tuple(d.get("upstream", ()))
        d["history"] = tuple(
            Attempt(**{**a, "outcome": None if a["outcome"] is None else Outcome(a["outcome"])})
            for a in d["history"]
        )
        jobs[d["id"]] = Job(**d)
    return jobs


def main(argv: list[str]) -> int:
    from tenure.app import App

    if len(argv) != 1:
        print("usage: python -m tests.fault.history RUN_DIR", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    run = load(directory)
    kept = directory / "jobs.jsonl"
    if kept.exists():  # what storage held at the end of the run
        jobs = load_jobs(kept)
        flows = directory / "stored_workflows.jsonl"
        workflows = load_workflows(flows) if flows.exists() else {}
    else:
        url = orjson.loads((directory / "manifest.json").read_bytes())["url"]
        with App(url) as app:
            jobs = stored_jobs(app, run.deliveries)
            workflows = stored_workflows(app, workflow_ids(run, jobs))
    report = check(run, jobs, workflows)
    print(report.table())
    return 1 if report.violations() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
