"""Job states and the transition table: the one source of truth.

Which component moves a job in and out of each state:

``waiting``    a workflow's step waiting for the steps it depends on; storage
               releases it (to ``queued`` or ``scheduled``) in the transaction
               that ends the last of them, or cancels it (``cancel_reason``
               upstream_failed) when one of them fails; a DLQ retry of that
               one makes it ``waiting`` again (``tenure.core.workflows``).
``scheduled``  enqueue with a delay, or a retry with backoff puts it here; the
               claim takes it once ``run_at`` has passed (the sweeper also
               promotes due jobs to ``queued`` so that counts stay truthful).
``queued``     enqueue, a promotion, a rescue without backoff, a drain hand-back
               or a retry from the DLQ put it here; only a claim takes it out.
``active``     a claim put it here, with a lease and a new fence; the lease
               holder settles it (complete, fail, release) or the sweeper
               rescues it when the lease expires or its worker dies. A cancel
               only marks it ``cancel_requested``: its worker learns it from
               its next heartbeat and stops the attempt.
``completed``  terminal; the lease holder completed it with a current fence.
``dead``       terminal until retried from the DLQ; a budget ran out, the handler
               raised ``Fail``, or no worker knew the task for the queue's
               ``unknown_task_grace``. ``dead_reason`` says which.
``cancelled``  terminal; a user cancelled it before it was claimed, or while it
               was active: then the lease holder's settle, or the sweeper's
               rescue, of its attempt put it here (anything but a completion).
               A workflow's step cancelled because a step it waits for failed
               waits again when that one is retried from the DLQ.

A finished job (completed, dead, cancelled) leaves storage when the sweeper
prunes it, its queue's ``keep_completed`` or ``keep_dead`` after it finished
(``tenure.core.retention``), or when an operator purges it from the DLQ.
"""

from __future__ import annotations

from enum import StrEnum

from tenure.errors import InvalidInput


class Name(StrEnum):
    """A StrEnum shown as its plain name, alone and inside containers: a queue's
    counts print ``{'queued': 1}``, not ``{<State.QUEUED: 'queued'>: 1}``. Its
    members are still str, so they compare, hash and serialize as their names."""

    def __repr__(self) -> str:
        return repr(self.value)


class State(Name):
    """Where a job is in its life (the module's doc says who moves it in and out)."""

    WAITING = "waiting"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    ACTIVE = "active"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Outcome(Name):
    """How one attempt ended, as recorded in the job's history."""

    COMPLETED = "completed"
    ERROR = "error"
    CRASHED = "crashed"
    STALLED = "stalled"
    TIMEOUT = "timeout"
    RELEASED = "released"
    CANCELLED = "cancelled"  # the job was cancelled while it ran: its worker stopped it


class DeadReason(Name):
    """Why a job is in the dead-letter queue."""

    ERROR = "error"  # Fail raised: retrying cannot help
    CRASHED = "crashed"  # the handler's process died and max_stalls ran out
    STALLED = "stalled"  # the lease holder stopped proving it was alive, max_stalls ran out
    TIMEOUT = "timeout"  # the last attempt hit its deadline and max_attempts ran out
    MAX_ATTEMPTS = "max_attempts"  # the last attempt raised and max_attempts ran out
    # no worker that claimed it knew its task, for the queue's unknown_task_grace
    UNKNOWN_TASK = "unknown_task"


# Outcomes that consume a stall as well as an attempt: the worker, not the
# handler's code, is what failed (or might have).
STALL_OUTCOMES = frozenset({Outcome.CRASHED, Outcome.STALLED})

UNFINISHED = frozenset({State.WAITING, State.SCHEDULED, State.QUEUED, State.ACTIVE})
TERMINAL = frozenset({State.COMPLETED, State.DEAD, State.CANCELLED})

TRANSITIONS: dict[State, frozenset[State]] = {
    State.WAITING: frozenset({State.QUEUED, State.SCHEDULED, State.CANCELLED}),
    State.SCHEDULED: frozenset({State.QUEUED, State.ACTIVE, State.CANCELLED}),
    State.QUEUED: frozenset({State.ACTIVE, State.CANCELLED}),
    State.ACTIVE: frozenset(
        {State.COMPLETED, State.SCHEDULED, State.QUEUED, State.DEAD, State.CANCELLED}
    ),
    State.COMPLETED: frozenset(),
    State.DEAD: frozenset({State.QUEUED}),
    State.CANCELLED: frozenset({State.WAITING}),  # a workflow's step, upstream retried
}


def can_transition(src: State, dst: State) -> bool:
    """Whether the state machine allows ``src -> dst``."""
    return dst in TRANSITIONS[src]


# A cancel ends these at once; an active job's cancel is a request to its worker.
CANCELLABLE = frozenset({State.WAITING, State.SCHEDULED, State.QUEUED})
CLAIMABLE = frozenset({State.SCHEDULED, State.QUEUED})


def parse_state(value: object) -> State:
    """The State named by ``value``, or InvalidInput naming the states."""
    try:
        return State(str(value))
    except ValueError:
        names = ", ".join(s.value for s in State)
        raise InvalidInput(f"unknown state {value!r}; states: {names}") from None
