"""One attempt this worker holds, as one record: from its claim until its row goes.

The table of attempts (``attempts.py``), the lease keeper (``leases.py``), the
completer's callbacks and the drain all read this one record; what it is
doing is its ``stage``, and the two things that can befall it whatever its
stage (its lease lost, its job cancelled) are flags on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tenure.backends.base import LeaseRef
from tenure.config import QueuePolicy
from tenure.job import Job


class Stage(enum.Enum):
    """Where an attempt is, from its claim to its settle."""

    STARTING = "starting"  # claimed, not begun: waits for its policy, or for room
    RUNNING = "running"  # begun on the executor (running, or waiting for a slot there)
    SETTLING = "settling"  # ended: its outcome is being written (its lease still renewed)
    WRITTEN = "written"  # settled, handed back or given up: its row goes


@dataclass(slots=True, eq=False)
class Attempt:
    """One attempt: its job, its queue's policy once known, its stage, and
    what befell it. Keyed by ``lease``, (job id, fence): the executor knows
    it by that key too (a worker may hold two attempts of one job)."""

    job: Job
    lease: LeaseRef
    policy: QueuePolicy | None = None  # the task's policy in its queue, once read
    stage: Stage = Stage.STARTING
    # Seconds it may run, from its start (the executor arms the deadline).
    timeout: float | None = None
    # Its lease is no longer held (the sweeper recovered it, or a drain handed
    # it back): it is stopped and never settles.
    lost: bool = False
    # Its job was cancelled while it was held: however it ends, the job ends
    # cancelled; its handler is told once.
    cancelling: bool = False

    @property
    def settling(self) -> bool:
        """Over: a lease found lost now has no attempt left to stop, and a cancel
        no handler left to tell."""
        return self.stage is Stage.SETTLING or self.stage is Stage.WRITTEN
