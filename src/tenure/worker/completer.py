"""Completions waiting for the supervisor's next cycle.

A handler's success is not written alone: it waits here until the supervisor's
next storage round trip, which completes every waiting job and claims jobs for
the free slots at once (``Backend.complete_and_claim``). At low load that round
trip leaves at once; under load each carries every completion that arrived
while the previous ones were in flight. Each caller still learns its own fate
(done, or LeaseLost).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from tenure.backends.base import LeaseRef
from tenure.core.payload import encode
from tenure.errors import InvalidInput, LeaseLost
from tenure.job import Job
from tenure.threads import resolve

log = logging.getLogger("tenure.worker")

Item = tuple[str, int, bytes]  # (job id, fence, result as JSON)


# Told, on the loop, how a completion's write went: None (done), LeaseLost, or
# the error that failed the whole cycle.
Written = Callable[[BaseException | None], None]


class Completer:
    """Successes waiting for the next cycle, which writes them all at once."""

    def __init__(self, max_payload: int, wake: Callable[[], None]) -> None:
        self.max_payload = max_payload
        self.wake = wake
        self._items: list[Item] = []
        self._written: list[Written] = []
        self._steps = False  # a workflow's step is among them: it may release others
        self.since = 0.0  # when the oldest waiting completion came (time.monotonic())

    def __len__(self) -> int:
        return len(self._items)

    def item(self, job: Job, result: Any) -> Item | None:
        """The completion of ``job`` with ``result``; None when the result is
        not JSON or too large (the attempt then fails instead)."""
        try:
            return job.id, job.fence, encode(result, what="job result", limit=self.max_payload)
        except InvalidInput:
            return None

    def add(self, item: Item, written: Written, *, step: bool = False) -> None:
        """Complete at the next cycle; ``written`` is told how it went.
        ``step``: the job is a workflow's step."""
        if not self._items:
            self.since = time.monotonic()
        self._steps = self._steps or step
        self._items.append(item)
        self._written.append(written)
        self.wake()

    async def complete(self, job_id: str, fence: int, result: Any) -> None:
        """Complete one job at the next cycle; InvalidInput for a result that is
        not JSON or too large, LeaseLost if the lease was no longer held."""
        payload = encode(result, what="job result", limit=self.max_payload)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.add((job_id, fence, payload), functools.partial(resolve, done, None))
        await done

    def take(self) -> Batch:
        """Every waiting completion, for one cycle."""
        batch = Batch(self._items, self._written, self._steps)
        self._items, self._written, self._steps = [], [], False
        return batch


class Batch:
    """Completions written together; ``written`` or ``failed`` tells each."""

    def __init__(self, items: list[Item], told: list[Written], steps: bool = False) -> None:
        self.items = items
        self._told = told
        self.releases = steps  # it may release workflow steps

    def written(self, lost: Collection[LeaseRef]) -> None:
        for (job_id, fence, _), tell in zip(self.items, self._told, strict=True):
            if (job_id, fence) in lost:
                _tell(tell, LeaseLost(f"job {job_id} is no longer held with fence {fence}"))
            else:
                _tell(tell, None)

    def failed(self, exc: BaseException) -> None:
        for tell in self._told:
            _tell(tell, exc)


def _tell(tell: Written, error: BaseException | None) -> None:
    """Each is told, whatever another's callback does."""
    try:
        tell(error)
    except Exception:
        log.exception("a completion's callback failed")
