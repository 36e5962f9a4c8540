"""Every stored transition a job goes through is one the state machine allows."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from tenure.core.retry import Decision
from tenure.core.states import CANCELLABLE, Outcome, State, can_transition
from tenure.errors import InvalidTransition, LeaseLost
from tenure.job import Job
from tests.conformance.helpers import (
    SHORT_LEASE,
    all_jobs,
    claim_one,
    decision_for,
    enqueue_one,
    register,
    rescue_until,
    spec,
    wait_for,
)


class Observer:
    """Reads every job after each step and checks each observed change of state."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.last: dict[str, Job] = {}
        self.transitions: set[tuple[State, State]] = set()

    def step(self, action: Callable[[], Any]) -> Any:
        result = action()
        self.check()
        return result

    def check(self) -> None:
        now = {j.id: j for j in all_jobs(self.backend)}
        assert set(self.last) <= set(now), "a job vanished"
        for job_id, job in now.items():
            old = self.last.get(job_id)
            if old is None:
                assert job.state in (State.QUEUED, State.SCHEDULED)
                continue
            if old.state != job.state:
                assert can_transition(old.state, job.state), (
                    f"forbidden transition {old.state} -> {job.state}"
                )
                self.transitions.add((old.state, job.state))
            assert job.fence >= old.fence, "a fence never goes back"
            # One step claims a job at most once: its fence grows by one at most.
            assert job.fence <= old.fence + 1
        self.last = now


def test_every_path_of_one_job__uses_only_allowed_transitions(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE.replace(max_attempts=10, max_stalls=10))
    w = register(backend, "worker-1")
    obs = Observer(backend)
    job = obs.step(lambda: enqueue_one(backend, delay=0.2))
    held: list[Job] = []

    def claim() -> None:
        held[:] = [claim_one(backend, w)]

    def claim_when_due() -> None:
        held[:] = wait_for(lambda: backend.claim(w, ["default"], 1))

    def fail(decision: Decision) -> None:
        backend.fail(job.id, held[0].fence, Outcome.ERROR, "e", decision)

    obs.step(lambda: wait_for(lambda: backend.rescue().promoted))  # scheduled -> queued
    obs.step(claim)  # queued -> active
    obs.step(lambda: fail(Decision(State.SCHEDULED, delay=0.2)))  # active -> scheduled
    obs.step(claim_when_due)  # scheduled -> active (due, taken by the claim)
    obs.step(lambda: fail(Decision(State.QUEUED)))  # active -> queued
    obs.step(claim)
    obs.step(lambda: rescue_until(backend, job.id))  # active -> queued (stalled)
    obs.step(claim)
    obs.step(lambda: backend.release(job.id, held[0].fence))  # active -> queued (drain)
    obs.step(claim)
    obs.step(lambda: fail(decision_for(backend, held[0], fatal=True)))  # active -> dead
    obs.step(lambda: backend.retry_dead("default", [job.id]))  # dead -> queued
    obs.step(claim)
    obs.step(lambda: backend.complete(job.id, held[0].fence, "done"))  # active -> completed
    scheduled = obs.step(lambda: enqueue_one(backend, delay=60))
    obs.step(lambda: backend.cancel(scheduled.id))  # scheduled -> cancelled
    queued = obs.step(lambda: enqueue_one(backend))
    obs.step(lambda: backend.cancel(queued.id))  # queued -> cancelled
    running = obs.step(lambda: enqueue_one(backend))
    obs.step(lambda: claim_one(backend, w))
    obs.step(lambda: backend.cancel(running.id))  # active, cancel requested
    obs.step(lambda: rescue_until(backend, running.id))  # active -> cancelled

    assert obs.transitions >= {
        (State.SCHEDULED, State.QUEUED),
        (State.QUEUED, State.ACTIVE),
        (State.ACTIVE, State.SCHEDULED),
        (State.SCHEDULED, State.ACTIVE),
        (State.ACTIVE, State.QUEUED),
        (State.ACTIVE, State.DEAD),
        (State.DEAD, State.QUEUED),
        (State.ACTIVE, State.COMPLETED),
        (State.SCHEDULED, State.CANCELLED),
        (State.QUEUED, State.CANCELLED),
        (State.ACTIVE, State.CANCELLED),
    }
    final = backend.get(job.id)
    assert final.state == State.COMPLETED
    assert final.fence == 6
    assert [a.fence for a in final.history] == [1, 2, 3, 4, 5, 6]


class RandomWalk:
    """Random operations, valid and invalid, by one worker on one queue."""

    def __init__(self, backend: Any, worker: str, rng: random.Random) -> None:
        self.backend = backend
        self.worker = worker
        self.rng = rng
        self.held: dict[str, int] = {}  # job id -> fence of the lease we hold

    def enqueue(self) -> None:
        delay = self.rng.choice([0, 0, 60])
        enqueue_one(self.backend, delay=delay, key=self.rng.choice([None, "k"]))

    def claim(self) -> None:
        for j in self.backend.claim(self.worker, ["default"], self.rng.randint(1, 3)):
            self.held[j.id] = j.fence

    def settle(self) -> None:
        if not self.held:
            return
        job_id = self.rng.choice(sorted(self.held))
        current = self.held[job_id]
        fence = current - self.rng.choice([0, 0, 0, 1])  # sometimes stale
        kind = self.rng.choice(["complete", "fail", "fatal", "release", "progress"])
        try:
            self._write(kind, job_id, fence)
        except LeaseLost:
            assert fence != current, "a write with the current fence was refused"
            return
        assert fence == current, "a write with a stale fence was accepted"
        if kind != "progress":
            del self.held[job_id]

    def _write(self, kind: str, job_id: str, fence: int) -> None:
        b = self.backend
        if kind == "complete":
            b.complete(job_id, fence, {"ok": 1})
        elif kind == "release":
            b.release(job_id, fence)
        elif kind == "progress":
            b.progress(job_id, fence, 1)
        else:
            d = decision_for(b, b.get(job_id), fatal=kind == "fatal", retry_in=0)
            b.fail(job_id, fence, Outcome.ERROR, "e", d)

    def cancel(self) -> None:
        job = self.rng.choice(all_jobs(self.backend))
        if job.state in CANCELLABLE:
            assert self.backend.cancel(job.id).state == State.CANCELLED
        elif job.state is State.ACTIVE:  # a request: its attempt's end cancels it
            assert self.backend.cancel(job.id).cancel_requested
        else:
            with pytest.raises(InvalidTransition):
                self.backend.cancel(job.id)

    def retry_dead(self) -> None:
        self.backend.retry_dead("default")

    def rescue(self) -> None:
        self.backend.rescue()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_walk__uses_only_allowed_transitions(backend: Any, seed: int) -> None:
    """Whatever is stored after each random operation moved only along allowed
    transitions; writes with the current fence succeed and stale ones are refused.
    (The default lease is long and the worker alive: no rescue takes a held job.)"""
    walk = RandomWalk(backend, register(backend, "worker-1"), random.Random(seed))
    obs = Observer(backend)
    obs.step(lambda: backend.enqueue([spec(args={"i": i}) for i in range(6)]))
    ops = [walk.enqueue, walk.claim, walk.claim, walk.settle, walk.settle, walk.settle]
    ops += [walk.cancel, walk.retry_dead, walk.rescue]
    for _ in range(120):
        obs.step(walk.rng.choice(ops))
    assert obs.transitions, "the walk moved nothing"
