"""Where the process pool's attempts run: which executor takes the next one.

An attempt begun goes to an executor at once if one is free, else it waits
here, in order, and goes to the first that frees. While jobs are short, a busy
executor is sent its next sync attempts ahead (up to ``QUEUED``), behind one
that started less than ``QUEUE_BEHIND`` ago, and goes on to them without
waiting for the supervisor: on a machine with fewer cores than the worker has
processes, the supervisor is not always running when an executor frees, and
one attempt ahead left executors waiting for it a third of the time.
"""

from __future__ import annotations

from collections import deque

from tenure.worker.executors.child_handle import Child, Running

# Seconds: a sync attempt waits in an executor's pipe only behind one that
# started less than this ago (a long one would hold it up).
QUEUE_BEHIND = 0.05
QUEUED = 3  # sync attempts that may wait in an executor's pipe


class Placement:
    """The pool's executors and the attempts waiting for one of them."""

    def __init__(self, async_slots: int, max_jobs: int | None) -> None:
        self.async_slots = async_slots
        self.max_jobs = max_jobs
        self.children: list[Child] = []
        # Attempts, not jobs: a worker may hold two attempts of one job (the
        # second claimed after the first was recovered from under it).
        self.waiting: deque[Running] = deque()  # begun, waiting for an executor

    def capacity(self) -> int:
        """How many more jobs can start now, whatever their kind."""
        free = -len(self.waiting)
        for c in self.children:  # asked often: kept lean
            if c.ready.done() and not (c.retiring or c.killed or c.gone):
                if not c.jobs:
                    free += 1
                elif not c.line:
                    free += self.async_slots - len(c.jobs)
        return max(free, 0)

    def room(self, now: float) -> int:
        """How many more jobs ``place`` sends to an executor now: as many as
        can start, and one more per executor to run after its current one."""
        return max(sum(self._spots(c, now) for c in self.children) - len(self.waiting), 0)

    def place(self, now: float) -> None:
        """Send waiting attempts, in order, to the executors free for them."""
        while self.waiting:
            if (child := self._slot(self.waiting[0].is_async, now)) is None:
                return
            child.take(self.waiting.popleft(), now)

    def _spots(self, c: Child, now: float) -> int:
        if not usable(c):
            return 0
        if c.jobs and not c.line:
            return self.async_slots - len(c.jobs)
        if c.jobs and not self._queues(c, now):
            return 0
        left = QUEUED + 1 if self.max_jobs is None else self.max_jobs - c.done - len(c.jobs)
        return max(min(QUEUED + 1 - len(c.line), left), 0)

    def _queues(self, c: Child, now: float) -> bool:
        """Whether a sync attempt may wait in ``c``'s pipe now: it runs one, of
        a pace short enough not to keep the next waiting long, and waits for
        no more than that one."""
        return (
            0 < len(c.line) == len(c.jobs) <= QUEUED
            and usable(c)
            and now - c.line[0].started < QUEUE_BEHIND
            and c.line[0].stop_reason is None
            and (self.max_jobs is None or c.done + len(c.jobs) < self.max_jobs)
        )

    def _slot(self, is_async: bool, now: float) -> Child | None:
        """The executor an attempt of this kind goes to now, if any."""
        free = [c for c in self.children if usable(c)]
        if is_async:
            shared = [c for c in free if c.jobs and not c.line
                      and len(c.jobs) < self.async_slots]  # fmt: skip
            if shared:
                return max(shared, key=lambda c: len(c.jobs))
        if (idle := next((c for c in free if not c.jobs), None)) is not None or is_async:
            return idle
        queues = [c for c in free if self._queues(c, now)]
        return min(queues, key=lambda c: (len(c.line), -c.line[0].started)) if queues else None


def usable(c: Child) -> bool:
    """Whether ``c`` takes attempts: started, and not retiring, killed or gone."""
    return c.ready.done() and not (c.retiring or c.killed or c.gone)
