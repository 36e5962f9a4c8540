"""A model-based test: random operations and faults against real storage, every
step checked against a plain-Python model of what storage must hold.

The machine drives one producer/operator backend and three workers' backends
(each one what a separate worker process would hold) through enqueue (keys,
priorities, delays, batches), claim, complete / fail / release / progress with
the current fence or a stale one, heartbeat, cancel, the DLQ verbs, clean
sweeps, and the fault "kill -9 a worker": its backend is closed without
deregistering, a sweep from another backend recovers its attempts as crashed,
and a replacement worker registers under a new id. After every step every job
is read back and compared with the model, field by field.

Deterministic by construction: leases are the default 15 s and scheduled jobs
are an hour away, so while an example runs (well under a second) no lease
expires and no job becomes due; the only recoveries are those of killed
workers, which the model predicts. The one wait is for a storage server to
notice a killed worker's closed connection: the kill sweeps until it has.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tenure.config import QueuePolicy
from tenure.core.retry import Decision, decide
from tenure.core.states import CANCELLABLE, TERMINAL, UNFINISHED, DeadReason, Outcome, State
from tenure.errors import InvalidTransition, JobNotFound, LeaseLost
from tenure.job import Job
from tests.conformance.helpers import all_jobs, register, spec, wait_for
from tests.conftest import SyncBackend

T = TypeVar("T")

QUEUES = ("default", "bulk")
SLOTS = 3  # workers alive at any time
# No enqueue beyond this many claimable or held jobs, or jobs in all: steps go to
# the jobs there are, through more of their life, and the check after each step
# stays cheap.
BACKLOG = 4
MAX_JOBS = 8
FAR = 3600.0  # a delay that never comes due while an example runs
# Small budgets so that every path (retry, dead by attempts, dead by stalls) is
# reached in a few steps; no backoff, so an error's retry is queued at once.
POLICY = QueuePolicy(max_attempts=3, max_stalls=2, backoff_base=0.0, backoff_jitter=0.0)

# No explain phase: it replays a failure many more times (minutes here, each run
# opening real storage) to annotate which arguments matter.
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)

PICK = st.integers(0, 63)  # an index into a list of candidates, taken modulo its length
SLOT = st.integers(0, SLOTS - 1)


def fresh_storage(url: str) -> tuple[str, Callable[[], None]]:
    """Empty storage of the same backend as ``url`` for one example, and its disposal.

    SQLite gets a new database file in a new directory beside the fixture's;
    PostgreSQL a new schema in the fixture's database; Redis is flushed.
    """
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        parent = Path(url.removeprefix("sqlite:///")).parent
        directory = tempfile.mkdtemp(prefix="model-", dir=parent)
        return f"sqlite:///{directory}/tenure.db", lambda: shutil.rmtree(directory)
    if parts.scheme in ("postgresql", "postgres"):
        separator = "&" if parts.query else "?"
        return f"{url}{separator}schema=model_{uuid.uuid4().hex[:12]}", lambda: None
    if parts.scheme in ("redis", "rediss", "unix"):
        import redis

        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url, lambda: None
    raise NotImplementedError(f"no per-example storage for {parts.scheme!r} backends")


def pick(candidates: Sequence[T], index: int) -> T:
    return candidates[index % len(candidates)]


# -- the model ---------------------------------------------------------------------


@dataclass
class ModelAttempt:
    attempt: int
    fence: int
    worker: str
    outcome: Outcome | None = None


@dataclass
class ModelJob:
    id: str
    queue: str
    key: str | None
    priority: int
    max_attempts: int | None
    seq: int  # insertion order
    line: int  # the order of run_at: enqueue time, or the time it left the DLQ
    state: State
    attempts: int = 0
    budget_from: int = 0  # attempts when it was last retried from the DLQ
    stalls: int = 0
    fence: int = 0
    worker: str | None = None
    dead_reason: DeadReason | None = None
    progress: Any = None
    result: Any = None
    history: list[ModelAttempt] = field(default_factory=list)

    def decision(
        self, outcome: Outcome, *, fatal: bool = False, retry_in: float | None = None
    ) -> Decision:
        """What ``tenure.core.retry`` decides from the model's counters."""
        return decide(
            outcome,
            attempts=self.attempts - self.budget_from,
            stalls=self.stalls,
            max_attempts=self.max_attempts or POLICY.max_attempts,
            max_stalls=POLICY.max_stalls,
            policy=POLICY,
            retry_in=retry_in,
            fatal=fatal,
            rng=random.Random(0),
        )

    def claim(self, worker: str) -> None:
        self.state = State.ACTIVE
        self.fence += 1
        self.attempts += 1
        self.worker = worker
        self.progress = None
        self.history.append(ModelAttempt(self.attempts, self.fence, worker))

    def _end(self, outcome: Outcome, state: State) -> None:
        self.history[-1].outcome = outcome
        self.worker = None
        self.state = state

    def complete(self, result: Any) -> None:
        self._end(Outcome.COMPLETED, State.COMPLETED)
        self.result = result

    def release(self) -> None:
        self._end(Outcome.RELEASED, State.QUEUED)
        self.attempts -= 1

    def fail(self, outcome: Outcome, decision: Decision) -> None:
        self._end(outcome, decision.state)
        self.stalls += int(decision.stall)
        if decision.state is State.DEAD:
            self.dead_reason = decision.dead_reason

    def retry(self, line: int) -> None:
        self.state = State.QUEUED
        self.budget_from, self.stalls = self.attempts, 0
        self.dead_reason = None
        self.line = line

    def view(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "key": self.key,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "state": self.state,
            "attempts": self.attempts,
            "budget_from": self.budget_from,
            "stalls": self.stalls,
            "fence": self.fence,
            "worker": self.worker,
            "dead_reason": self.dead_reason,
            "progress": self.progress,
            "result": self.result,
            "leased": self.state is State.ACTIVE,
            "finished": self.state in TERMINAL,
            "history": [
                (a.attempt, a.fence, a.worker, a.outcome, a.outcome is not None)
                for a in self.history
            ],
        }


def stored_view(job: Job) -> dict[str, Any]:
    return {
        "queue": job.queue,
        "key": job.key,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "state": job.state,
        "attempts": job.attempts,
        "budget_from": job.budget_from,
        "stalls": job.stalls,
        "fence": job.fence,
        "worker": job.worker,
        "dead_reason": job.dead_reason,
        "progress": job.progress,
        "result": job.result,
        "leased": job.lease_expires_at is not None,
        "finished": job.finished_at is not None,
        "history": [
            (a.attempt, a.fence, a.worker, a.outcome, a.ended_at is not None) for a in job.history
        ],
    }


# -- the machine -------------------------------------------------------------------

ENQUEUE_SPEC = st.fixed_dictionaries(
    {
        "queue": st.sampled_from(QUEUES),
        "key": st.sampled_from([None, "k1", "k2"]),
        "priority": st.sampled_from([0, 1, -1]),
        "delay": st.sampled_from([0.0, 0.0, FAR]),  # mostly due: claims find work
        "max_attempts": st.sampled_from([None, 1, 2]),
    }
)
FAILURES = st.sampled_from([Outcome.ERROR, Outcome.TIMEOUT, Outcome.CRASHED])
STALE_WRITES = st.sampled_from(["complete", "fail-queued", "fail-dead", "release", "progress"])


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, base_url: str, opener: Callable[[str], SyncBackend]) -> None:
        super().__init__()
        self.url, self.dispose = fresh_storage(base_url)
        self.opener = opener
        self.opened: list[SyncBackend] = []
        self.admin = self.open()  # the producer and operator: never a worker
        for queue in QUEUES:
            self.admin.set_policy(queue, POLICY)
        self.generation = 0
        self.workers = [self.spawn(slot) for slot in range(SLOTS)]
        self.jobs: dict[str, ModelJob] = {}
        self.purged: list[str] = []
        self.seq = 0
        self.tick = 0

    def open(self) -> SyncBackend:
        backend = self.opener(self.url)
        self.opened.append(backend)
        return backend

    def spawn(self, slot: int) -> tuple[str, SyncBackend]:
        """A fresh worker process: its own backend, registered under a new id."""
        self.generation += 1
        backend = self.open()
        return register(backend, f"w{slot}-{self.generation}", QUEUES), backend

    def teardown(self) -> None:
        for backend in reversed(self.opened):
            backend.close()  # idempotent: killed workers' backends are closed already
        self.dispose()

    # -- views of the model ------------------------------------------------------

    def backend_of(self, worker: str | None) -> SyncBackend:
        return next(b for w, b in self.workers if w == worker)

    def in_state(self, *states: State) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.state in states]

    def active(self) -> list[ModelJob]:
        return self.in_state(State.ACTIVE)

    def holder_of(self, queue: str, key: str | None) -> ModelJob | None:
        if key is None:
            return None
        unfinished = (j for j in self.jobs.values() if j.state in UNFINISHED)
        return next((j for j in unfinished if (j.queue, j.key) == (queue, key)), None)

    def stale_refs(self) -> list[tuple[ModelJob, int]]:
        """Every (job, fence) that no lease holds: old, current-but-settled, or future."""
        return [
            (job, fence)
            for job in self.jobs.values()
            for fence in range(job.fence + 2)
            if not (job.state is State.ACTIVE and fence == job.fence)
        ]

    def dlq_selection(self, queue: str, picks: list[int] | None) -> list[ModelJob]:
        """The jobs a DLQ verb names (dead ones first, so that picks mostly hit),
        or every dead job of ``queue`` when ``picks`` is None."""
        if picks is None:
            return [j for j in self.in_state(State.DEAD) if j.queue == queue]
        candidates = sorted(self.jobs.values(), key=lambda j: (j.state is not State.DEAD, j.seq))
        chosen: list[ModelJob] = []
        for p in picks:
            if candidates and (job := pick(candidates, p)) not in chosen:
                chosen.append(job)
        return chosen

    # -- producers ---------------------------------------------------------------

    @initialize(specs=st.lists(ENQUEUE_SPEC, min_size=1, max_size=4))
    def first_jobs(self, specs: list[dict[str, Any]]) -> None:
        self.enqueue(specs)

    @precondition(
        lambda self: (
            len(self.in_state(State.QUEUED, State.ACTIVE)) < BACKLOG and len(self.jobs) < MAX_JOBS
        )
    )
    @rule(specs=st.lists(ENQUEUE_SPEC, min_size=1, max_size=3))
    def enqueue(self, specs: list[dict[str, Any]]) -> None:
        batch = [spec(**s) for s in specs]
        got = self.admin.enqueue(batch)
        self.tick += 1
        expected: list[ModelJob] = []
        for s in batch:
            job = self.holder_of(s.queue, s.key)
            if job is None:
                self.seq += 1
                state = State.SCHEDULED if s.delay else State.QUEUED
                job = ModelJob(
                    s.id, s.queue, s.key, s.priority, s.max_attempts, self.seq, self.tick, state
                )
                self.jobs[job.id] = job
            expected.append(job)
        assert [(j.id, j.state) for j in got] == [(j.id, j.state) for j in expected]

    # -- lease holders -----------------------------------------------------------

    @precondition(lambda self: self.in_state(State.QUEUED))
    @rule(
        slot=SLOT,
        queues=st.sampled_from([("default",), ("bulk",), QUEUES]),
        limit=st.integers(1, 3),
    )
    def claim(self, slot: int, queues: tuple[str, ...], limit: int) -> None:
        worker, backend = self.workers[slot]
        ready = [j for j in self.in_state(State.QUEUED) if j.queue in queues]
        ready.sort(key=lambda j: (-j.priority, j.line, j.seq))
        got = backend.claim(worker, list(queues), limit)
        assert sorted(j.id for j in got) == sorted(j.id for j in ready[:limit])
        for job in ready[:limit]:
            job.claim(worker)
        for j in got:
            job = self.jobs[j.id]
            assert (j.state, j.fence, j.attempts, j.worker) == (
                State.ACTIVE,
                job.fence,
                job.attempts,
                worker,
            )

    @precondition(lambda self: self.active())
    @rule(p=PICK, result=st.none() | st.integers(0, 9))
    def complete(self, p: int, result: int | None) -> None:
        job = pick(self.active(), p)
        self.backend_of(job.worker).complete(job.id, job.fence, result)
        job.complete(result)

    @precondition(lambda self: self.active())
    @rule(
        p=PICK,
        outcome=FAILURES,
        fatal=st.booleans(),
        retry_in=st.sampled_from([None, 0.0, FAR]),
    )
    def fail(self, p: int, outcome: Outcome, fatal: bool, retry_in: float | None) -> None:
        job = pick(self.active(), p)
        decision = job.decision(outcome, fatal=fatal, retry_in=retry_in)
        self.backend_of(job.worker).fail(job.id, job.fence, outcome, "boom", decision)
        job.fail(outcome, decision)

    @precondition(lambda self: self.active())
    @rule(p=PICK)
    def release(self, p: int) -> None:
        job = pick(self.active(), p)
        self.backend_of(job.worker).release(job.id, job.fence)
        job.release()

    @precondition(lambda self: self.active())
    @rule(p=PICK, n=st.integers(0, 9))
    def progress(self, p: int, n: int) -> None:
        job = pick(self.active(), p)
        self.backend_of(job.worker).progress(job.id, job.fence, {"n": n})
        job.progress = {"n": n}

    @precondition(lambda self: any(j.fence for j in self.jobs.values()))
    @rule(p=PICK, slot=SLOT, verb=STALE_WRITES)
    def stale_write(self, p: int, slot: int, verb: str) -> None:
        """A write with a fence no lease holds is refused and changes nothing."""
        job, fence = pick(self.stale_refs(), p)
        backend = self.workers[slot][1]
        before = self.admin.get(job.id)
        with pytest.raises(LeaseLost):
            if verb == "complete":
                backend.complete(job.id, fence, "late")
            elif verb == "fail-queued":
                backend.fail(job.id, fence, Outcome.ERROR, "late", Decision(State.QUEUED))
            elif verb == "fail-dead":
                dead = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
                backend.fail(job.id, fence, Outcome.ERROR, "late", dead)
            elif verb == "release":
                backend.release(job.id, fence)
            else:
                backend.progress(job.id, fence, {"late": True})
        assert self.admin.get(job.id) == before

    @precondition(lambda self: self.active())
    @rule(slot=SLOT, extra=st.lists(PICK, max_size=3))
    def heartbeat(self, slot: int, extra: list[int]) -> None:
        """A heartbeat reports exactly the presented leases the worker does not hold."""
        worker, backend = self.workers[slot]
        held = {(j.id, j.fence) for j in self.active() if j.worker == worker}
        refs = [(j.id, f) for j in self.jobs.values() for f in range(1, j.fence + 1)]
        asked = held | {pick(refs, i) for i in extra if refs}
        assert backend.heartbeat(worker, asked).lost == asked - held

    # -- the sweeper and the fault -----------------------------------------------

    @rule(sweeper=st.integers(0, SLOTS))
    def sweep(self, sweeper: int) -> None:
        """With every worker alive and no lease expired, a sweep recovers nothing.
        (Always possible: the machine never runs out of steps.)"""
        backend = [self.admin, *(b for _, b in self.workers)][sweeper]
        report = backend.rescue()
        assert report.swept
        assert (report.rescued, report.promoted, report.dead_workers) == ((), 0, ())

    @precondition(lambda self: self.active())
    @rule(victim=SLOT, sweeper=st.integers(0, SLOTS - 1))
    def kill_worker(self, victim: int, sweeper: int) -> None:
        """kill -9 of a worker: sweeps from another backend recover each of its
        attempts once, as crashed; a replacement registers under a new id."""
        worker, doomed = self.workers[victim]
        doomed.close()  # as a kill -9 would: no deregister
        others = [self.admin, *(b for i, (_, b) in enumerate(self.workers) if i != victim)]
        rescued, dead = self.sweep_until_buried(pick(others, sweeper), worker)
        expected = []
        for job in self.active():
            if job.worker == worker:
                decision = job.decision(Outcome.CRASHED)
                expected.append((job.id, job.fence, Outcome.CRASHED, decision.state))
                job.fail(Outcome.CRASHED, decision)
        assert sorted(rescued) == sorted(expected)
        assert dead == [worker]
        self.workers[victim] = self.spawn(victim)

    @staticmethod
    def sweep_until_buried(
        sweeper: SyncBackend, worker: str, timeout: float = 5.0
    ) -> tuple[list[tuple[str, int, Outcome, State]], list[str]]:
        """Sweep until a sweep finds ``worker`` gone, then once more; return what
        the sweeps recovered and the workers they found dead.

        The storage server may notice the closed connection a moment later
        (PostgreSQL, Redis); SQLite sees the released ``flock`` at once. The
        sweep after the burial proves that nothing was left for later.
        """
        rescued: list[tuple[str, int, Outcome, State]] = []
        dead: list[str] = []

        def sweep() -> bool:
            report = sweeper.rescue()
            assert report.swept
            assert report.promoted == 0
            rescued.extend((r.job_id, r.fence, r.outcome, r.state) for r in report.rescued)
            dead.extend(report.dead_workers)
            return worker in dead

        wait_for(sweep, timeout=timeout, interval=0.005)
        sweep()
        return rescued, dead

    # -- operators ---------------------------------------------------------------

    @precondition(lambda self: self.in_state(*CANCELLABLE))
    @rule(p=PICK, refused=st.booleans())
    def cancel(self, p: int, refused: bool) -> None:
        """Scheduled and queued jobs can be cancelled; finished ones are refused,
        unchanged. (An active job's cancel, a request, is test_abort.py's.)"""
        others = [j for j in self.jobs.values() if j.state in TERMINAL]
        job = pick(others if refused and others else self.in_state(*CANCELLABLE), p)
        if job.state in CANCELLABLE:
            assert self.admin.cancel(job.id).state is State.CANCELLED
            job.state = State.CANCELLED
            return
        before = self.admin.get(job.id)
        with pytest.raises(InvalidTransition):
            self.admin.cancel(job.id)
        assert self.admin.get(job.id) == before

    @precondition(lambda self: self.in_state(State.DEAD))
    @rule(queue=st.sampled_from(QUEUES), picks=st.none() | st.lists(PICK, max_size=3))
    def retry_dead(self, queue: str, picks: list[int] | None) -> None:
        """Dead jobs go back to the queue with budgets reset; a keyed job stays dead
        while its key belongs to an unfinished job (one of several dead namesakes
        may go back, the backend chooses which)."""
        selection = self.dlq_selection(queue, picks)
        ids = None if picks is None else [j.id for j in selection]
        moved = self.admin.retry_dead(queue, ids)
        self.tick += 1
        candidates = [j for j in selection if j.queue == queue and j.state is State.DEAD]
        by_key: dict[str | None, list[ModelJob]] = {}
        for job in candidates:
            if self.holder_of(queue, job.key) is None:
                by_key.setdefault(job.key, []).append(job)
        retried = by_key.pop(None, [])
        for namesakes in by_key.values():
            back = [j for j in namesakes if self.admin.get(j.id).state is State.QUEUED]
            assert len(back) == 1, f"{len(back)} of the dead jobs with key {namesakes[0].key}"
            retried += back
        for job in retried:
            job.retry(self.tick)
        assert moved == len(retried)

    @precondition(lambda self: self.in_state(State.DEAD))
    @rule(queue=st.sampled_from(QUEUES), picks=st.none() | st.lists(PICK, max_size=3))
    def purge_dead(self, queue: str, picks: list[int] | None) -> None:
        selection = self.dlq_selection(queue, picks)
        ids = None if picks is None else [j.id for j in selection]
        purged = [j for j in selection if j.queue == queue and j.state is State.DEAD]
        assert self.admin.purge_dead(queue, ids) == len(purged)
        for job in purged:
            del self.jobs[job.id]
            self.purged.append(job.id)

    @precondition(lambda self: self.purged)
    @rule(p=PICK, slot=SLOT)
    def purged_job_is_gone(self, p: int, slot: int) -> None:
        job_id = pick(self.purged, p)
        with pytest.raises(JobNotFound):
            self.admin.get(job_id)
        with pytest.raises(JobNotFound):
            self.workers[slot][1].complete(job_id, 1, "late")

    # -- the check after every step ----------------------------------------------

    @invariant()
    def storage_matches_the_model(self) -> None:
        assert {j.id for j in all_jobs(self.admin)} == set(self.jobs)
        for job in self.jobs.values():
            stored, model = stored_view(self.admin.get(job.id)), job.view()
            diff = {
                k: f"stored {stored[k]!r}, model {model[k]!r}"
                for k in model
                if stored[k] != model[k]
            }
            assert not diff, f"job {job.id} (enqueued #{job.seq}): {diff}"
        for queue in QUEUES:
            expected = count_states(j for j in self.jobs.values() if j.queue == queue)
            assert self.admin.counts(queue) == expected
        assert {w.id for w in self.admin.workers()} == {w for w, _ in self.workers}


def count_states(jobs: Iterable[ModelJob]) -> dict[State, int]:
    counts = dict.fromkeys(State, 0)
    for job in jobs:
        counts[job.state] += 1
    return counts


# A passing run takes seconds per backend. Shrinking a failure replays hundreds of
# shorter examples, each on new real storage: a minute on SQLite, several on a
# server. Cut short by the default 120 s timeout, it would be reported as a
# confusing FlakyStrategyDefinition without the minimal example.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_storage_matches_the_model_after_every_step(
    backend_url: str, open_killable: Callable[[str], SyncBackend]
) -> None:
    # run_state_machine_as_test inside a plain test (not @given on a test with
    # fixtures): each example builds its own machine on its own fresh storage, so
    # the function-scoped fixtures (a URL, an opener) are safely shared.
    run_state_machine_as_test(lambda: QueueMachine(backend_url, open_killable), settings=SETTINGS)


@pytest.mark.parametrize("picks", [None, [0, 1]], ids=["all", "by-id"])
def test_retry_of_two_dead_jobs_with_one_key__sends_one_back(
    backend_url: str, open_killable: Callable[[str], SyncBackend], picks: list[int] | None
) -> None:
    """A failure the machine found, shrunk and replayed by hand: two dead jobs
    share a key that no unfinished job holds, and the DLQ retries both."""
    machine = QueueMachine(backend_url, open_killable)
    keyed = {"queue": "default", "key": "k1", "priority": 0, "delay": 0.0, "max_attempts": None}
    try:
        for _ in range(2):
            machine.enqueue([keyed])
            machine.claim(slot=0, queues=("default",), limit=1)
            machine.fail(p=0, outcome=Outcome.ERROR, fatal=True, retry_in=None)
        machine.storage_matches_the_model()
        machine.retry_dead(queue="default", picks=picks)
        machine.storage_matches_the_model()
    finally:
        machine.teardown()
