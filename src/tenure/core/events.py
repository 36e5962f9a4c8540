"""Lifecycle events: what storage records with every transition, in the same
transaction (or script) as the transition itself, so that none is lost and
none is invented. Pure: which events a transition emits, and their shape.

A failed attempt emits up to two events: ``stalled`` (with the detector that
noticed, when the worker rather than the handler failed, or the deadline hit)
then the job's fate, ``retrying`` (with the delay), ``dead`` (with the
``dead_reason``) or, for a job cancelled while it ran, ``cancelled`` (with the
attempt's outcome).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tenure.core.retry import Decision
from tenure.core.states import Outcome, State


class EventKind(StrEnum):
    """The kinds of lifecycle event, one per transition (see docs/observability.md)."""

    ENQUEUED = "enqueued"
    STARTED = "started"
    PROGRESS = "progress"
    COMPLETED = "completed"
    RETRYING = "retrying"
    STALLED = "stalled"
    DEAD = "dead"
    RELEASED = "released"
    CANCELLED = "cancelled"
    RETRIED = "retried"  # from the DLQ, by hand: {"by": RetriedBy, "attempts": made so far}
    PURGED = "purged"
    # A workflow's step (tenure.core.workflows): every step it waits for ended,
    # it is queued or scheduled ({"workflow": id}); cancelled because one failed
    # (``cancelled`` with {"reason": "upstream_failed", "workflow": id}); waiting
    # again after that one's DLQ retry ({"workflow": id}).
    READY = "ready"
    WAITING = "waiting"
    # The workflow ended ({"workflow": id, "outcome": completed | failed |
    # cancelled}), recorded with the transition of the step that ended it.
    WORKFLOW_ENDED = "workflow_ended"


class RetriedBy(StrEnum):
    """Who retried a dead job from the DLQ (the ``retried`` event's ``by``)."""

    PYTHON = "python"  # Queue.retry_dead
    CLI = "cli"  # tenure dlq retry
    API = "api"  # POST /api/queues/{queue}/dead/retry
    DASHBOARD = "dashboard"  # the dashboard's DLQ page (through the API)


class Detector(StrEnum):
    """Who noticed that an attempt would not end by itself."""

    WORKER_GONE = "worker_gone"  # the sweeper: the worker's liveness lock is free
    LEASE_EXPIRED = "lease_expired"  # the sweeper: the lease was not renewed in time
    EXECUTOR_DIED = "executor_died"  # the supervisor: the handler's process exited
    DEADLINE = "deadline"  # the supervisor: the attempt ran past its timeout


@dataclass(frozen=True, slots=True)
class Event:
    """One lifecycle event, as storage recorded it.

    ``id`` is opaque and ordered: events come in id order, and passing an
    event's id back as ``after=`` resumes right after it. ``at`` is the
    storage's clock, in epoch seconds.
    """

    id: str
    kind: str
    job_id: str
    queue: str
    at: float
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "job_id": self.job_id, "queue": self.queue,
                "at": self.at, "data": self.data}  # fmt: skip


def detector(outcome: Outcome, *, rescued: bool) -> Detector | None:
    """The detector of an attempt that ended with ``outcome``: the sweeper's
    (``rescued``) or the supervisor's; None for an error of the handler."""
    if outcome is Outcome.CRASHED:
        return Detector.WORKER_GONE if rescued else Detector.EXECUTOR_DIED
    if outcome is Outcome.STALLED:
        return Detector.LEASE_EXPIRED
    if outcome is Outcome.TIMEOUT:
        return Detector.DEADLINE
    return None


def failure_events(
    outcome: Outcome,
    decision: Decision,
    *,
    rescued: bool,
    stall: Mapping[str, Any] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The events of a failed attempt, in order: ``(kind, data)``. ``stall``:
    more of the ``stalled`` event's data (the sweeper's: the worker, and how
    long it had been silent)."""
    events: list[tuple[str, dict[str, Any]]] = []
    found = detector(outcome, rescued=rescued)
    if found is not None:
        events.append((EventKind.STALLED, {"detector": found.value, **(stall or {})}))
    if decision.state is State.CANCELLED:
        events.append((EventKind.CANCELLED, {"outcome": outcome.value}))
    elif decision.state is State.DEAD:
        reason = decision.dead_reason.value if decision.dead_reason else None
        events.append((EventKind.DEAD, {"dead_reason": reason, "outcome": outcome.value}))
    else:
        data = {"delay": decision.delay, "outcome": outcome.value}
        events.append((EventKind.RETRYING, data))
    return events
