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
from collections.abc import Callable, Collection
from typing import Any

from tenure.backends.base import LeaseRef
from tenure.core.payload import encode
from tenure.errors import LeaseLost

Item = tuple[str, int, bytes]  # (job id, fence, result as JSON)


class Completer:
    def __init__(self, max_payload: int, wake: Callable[[], None]) -> None:
        self.max_payload = max_payload
        self.wake = wake
        self._items: list[Item] = []
        self._waiting: list[asyncio.Future[None]] = []

    def __len__(self) -> int:
        return len(self._items)

    async def complete(self, job_id: str, fence: int, result: Any) -> None:
        """Complete one job at the next cycle; InvalidInput for a result that is
        not JSON or too large, LeaseLost if the lease was no longer held."""
        payload = encode(result, what="job result", limit=self.max_payload)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._items.append((job_id, fence, payload))
        self._waiting.append(done)
        self.wake()
        await done

    def take(self) -> Batch:
        """Every waiting completion, for one cycle."""
        batch = Batch(self._items, self._waiting)
        self._items, self._waiting = [], []
        return batch


class Batch:
    """Completions written together; ``written`` or ``failed`` tells their callers."""

    def __init__(self, items: list[Item], waiting: list[asyncio.Future[None]]) -> None:
        self.items = items
        self._waiting = waiting

    def written(self, lost: Collection[LeaseRef]) -> None:
        for (job_id, fence, _), done in zip(self.items, self._waiting, strict=True):
            if done.done():  # its caller was cancelled
                continue
            if (job_id, fence) in lost:
                done.set_exception(LeaseLost(f"job {job_id} is no longer held with fence {fence}"))
            else:
                done.set_result(None)

    def failed(self, exc: BaseException) -> None:
        for done in self._waiting:
            if not done.done():
                done.set_exception(exc)
