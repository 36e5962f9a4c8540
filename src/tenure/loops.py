"""An App's backend on one event loop: opened there at first use, closed with it.

An App used with ``await`` and never closed (no ``aclose()``, no ``async with``)
would leave its connections open past its loop, to be found by the garbage
collector (a ResourceWarning each). ``asyncio.run`` ends by cancelling every
task left on its loop and waiting for them, then closes the loop: a task of
ours waits on the loop for that cancellation and closes the backend then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tenure.backends.base import Backend
from tenure.results import stop_watches

__all__ = ["LoopBackend", "closed"]


class LoopBackend:
    """The backend ``make()`` gives, opened on ``loop`` by a task that holds it
    open until it is cancelled: by ``close()``, or by the loop's end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[], Backend]) -> None:
        self.loop = loop
        self._opened: asyncio.Future[Backend] = loop.create_future()
        self._task = loop.create_task(self._hold(make), name="tenure-backend")

    @property
    def ended(self) -> bool:
        """Whether its task is over: it failed to open, or it closed."""
        return self._task.done()

    async def backend(self) -> Backend:
        """The backend, once open; what opening raised, if it failed."""
        # Shielded: a caller cancelled does not cancel others' wait for the opening.
        return await asyncio.shield(self._opened)

    async def close(self) -> None:
        """Close the backend (on its loop, which is running), and wait for it."""
        self._task.cancel()
        await asyncio.wait([self._task])  # raises only if the caller is cancelled

    def abandon(self) -> None:
        """Forget it without closing it: in a forked child, where its loop, its
        task and its connections are copies of the parent's, never to run."""
        self._task._log_destroy_pending = False  # type: ignore[attr-defined]

    async def _hold(self, make: Callable[[], Backend]) -> None:
        try:
            backend = make()
            try:
                await backend.open()
            except BaseException:
                await backend.close()
                raise
        except Exception as exc:
            self._opened.set_exception(exc)
            return
        except BaseException:  # cancelled, or the process is stopping
            self._opened.cancel()
            raise
        self._opened.set_result(backend)
        try:
            await self.loop.create_future()  # until cancelled
        except asyncio.CancelledError:
            await closed(backend)
            raise


async def closed(backend: Backend) -> None:
    """Close ``backend``: results' readers of events end before their connections."""
    await stop_watches(backend)
    await backend.close()
