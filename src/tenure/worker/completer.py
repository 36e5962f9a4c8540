"""Completions, batched: while one batch is being written, the next gathers.

At low load a completion is written at once, alone; under load, each
transaction carries every completion that arrived while the previous one was
being written. Each caller still learns its own fate (done, or LeaseLost).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tenure.backends.base import Backend
from tenure.core.payload import encode
from tenure.errors import LeaseLost

log = logging.getLogger("tenure.worker")

Pending = tuple[str, int, bytes, "asyncio.Future[None]"]


class Completer:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._pending: list[Pending] = []
        self._flushing: asyncio.Task[None] | None = None
        self.batches = 0

    async def complete(self, job_id: str, fence: int, result: Any) -> None:
        """Complete one job; InvalidInput for a result that is not JSON or too
        large, LeaseLost if the lease was no longer held."""
        payload = encode(result, what="job result", limit=self.backend.max_payload)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((job_id, fence, payload, done))
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                self.batches += 1
                try:
                    lost = await self.backend.complete_many([(i, f, p) for i, f, p, _ in batch])
                except Exception as exc:
                    for *_, done in batch:
                        done.set_exception(exc)
                    continue
                for job_id, fence, _, done in batch:
                    if (job_id, fence) in lost:
                        done.set_exception(
                            LeaseLost(f"job {job_id} is no longer held with fence {fence}")
                        )
                    else:
                        done.set_result(None)
        finally:
            self._flushing = None
