"""The tasks this worker does not know, which its claims pass over for a while.

A job of a task the worker has no handler for (a rolling deploy: a newer
worker knows it) is handed back in its place in line, not delayed, so that a
worker that knows the task takes it at its next claim, whatever older workers
do. The worker that handed it back passes that task over in its claims
(``Backend.complete_and_claim``'s ``skip_tasks``) for the wait
``tenure.core.retry.decide_unknown_task`` decided, then looks again: once the
queue's ``unknown_task_grace`` has run out, it dead-letters the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class UnknownTasks:
    """Task names this worker's claims pass over, each until a time of its own."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def pass_over(self, task: str, seconds: float) -> None:
        """Claim no job of ``task`` for ``seconds`` (or longer, if asked before)."""
        until = self._clock() + seconds
        self._until[task] = max(until, self._until.get(task, until))

    def passed_over(self) -> tuple[str, ...]:
        """The tasks a claim passes over now (none for a worker that knows every
        task it met: the claim without a filter)."""
        if not self._until:
            return ()
        now = self._clock()
        for task in [t for t, until in self._until.items() if until <= now]:
            del self._until[task]
        return tuple(self._until)
