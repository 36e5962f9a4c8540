"""What every executor is to the supervisor: the protocol, and how an attempt ends.

An executor turns one attempt into an :class:`AttemptResult`; the supervisor
decides what that means for the job (``tenure.worker.outcome``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tenure.backends.base import LeaseRef
from tenure.core.workflows import Flow
from tenure.job import Job


class Raise(enum.StrEnum):
    """What a handler raised, as the supervisor tells it apart."""

    ERROR = "error"  # any exception: the retry policy decides
    RETRY = "retry"  # tenure.Retry: again, after its own delay
    FAIL = "fail"  # tenure.Fail: dead at once
    CANCELLED = "cancelled"  # asyncio.CancelledError nobody asked for


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned ``value`` (the job's result, not yet checked as JSON)."""

    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler raised; ``traceback`` says what, ``retry_in`` and ``reason``
    come with a :class:`tenure.Retry`."""

    kind: Raise
    traceback: str
    retry_in: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The attempt passed its deadline of ``after`` seconds and was stopped."""

    after: float


@dataclass(frozen=True, slots=True)
class Crashed:
    """The process running the handler died under it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Settled:
    """The handler completed its job itself, in its own transaction
    (``job.transaction()``); ``error`` is what it raised afterwards, if anything."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The supervisor stopped the attempt (lease lost, drain budget spent, or
    collateral of stopping another attempt in the same process)."""


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The job was cancelled while the attempt ran and the handler was told:
    whatever ended the attempt then (``how``), the job ends ``cancelled``."""

    how: str


AttemptResult = Returned | Raised | TimedOut | Crashed | Settled | Stopped | Cancelled
HandlerEnd = Returned | Raised | Settled  # how a handler itself ended its attempt

# What an executor calls, on the supervisor's loop, when an attempt has ended:
# its result, and how long it ran (seconds from its start; 0 if it never started).
OnEnd = Callable[[AttemptResult, float], None]


class Link(Protocol):
    """What a running handler asks of the supervisor, through its executor."""

    async def progress(self, job: Job, data: Any) -> None:
        """Record the handler's progress report for its attempt."""

    async def heartbeat(self, job: Job) -> None:
        """Renew the attempt's lease now; LeaseLost if it is no longer held."""

    async def upstream(self, job: Job) -> list[Any]:
        """The values of the steps the workflow's step ``job`` waited for."""

    async def spawn(self, job: Job, seq: int, flow: Flow) -> list[str]:
        """Add ``flow`` to the step's workflow as its ``seq``-th spawn
        (``Backend.spawn``); the ids of the jobs it made."""


class Executor(Protocol):
    """Runs attempts; the supervisor asks it how many more it can take."""

    def capacity(self) -> int:
        """Free slots: attempts that would start now."""

    def room(self) -> int:
        """How many more attempts ``begin`` takes now: the free slots, and those
        it keeps to start by itself as slots free."""

    async def start(self) -> None:
        """Get ready to run attempts (start threads or processes)."""

    def begin(self, job: Job, timeout: float | None, on_end: OnEnd) -> None:
        """Start an attempt now, or as soon as a slot frees (it counts against
        capacity at once, and its deadline runs from its start); call
        ``on_end`` with its result, exactly once, from the loop."""

    def withdraw(self) -> list[Job]:
        """Take back the attempts begun that have not started (waiting for a
        slot): they never will, and ``on_end`` is not called for them."""

    def stop(self, lease: LeaseRef) -> None:
        """End one attempt (job id and fence: a worker may hold two of one job)
        with Stopped; its handler is killed, cancelled or abandoned."""

    def abort(self, lease: LeaseRef, grace: float) -> None:
        """Tell a running attempt's handler that its job was cancelled
        (``current_job().cancelled``; an async one's task is cancelled) and, if
        it has not ended ``grace`` seconds later, stop it as ``stop`` does. One
        that has not started is stopped now."""

    async def close(self) -> None:
        """Stop every handler and release threads or processes."""
