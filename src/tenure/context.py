"""``tenure.current_job()``: what a running handler knows about its attempt."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import TenureError


@dataclass(frozen=True)
class JobContext:
    """The running attempt of a job, as its handler sees it.

    ``fence`` identifies this attempt: a handler can pass it downstream to fence
    its own writes, so that a stale attempt's late write is refused there too.
    """

    id: str
    task: str
    queue: str
    attempt: int
    fence: int
    args: dict[str, Any]
    _progress: Callable[[Any], None] = field(repr=False)
    _heartbeat: Callable[[], None] = field(repr=False)

    def progress(self, data: Any) -> None:
        """Record a JSON progress report, fenced (raises LeaseLost if the job was recovered)."""
        self._progress(data)

    def heartbeat(self) -> None:
        """Prove this attempt is alive now (the worker also does it on its own)."""
        self._heartbeat()

    def transaction(self) -> AbstractContextManager[Any]:
        """Settle the job inside the handler's own database transaction.

        Not available yet on this backend; see the PostgreSQL issue.
        """
        return _unsupported()


@contextmanager
def _unsupported() -> Iterator[Any]:
    raise TenureError("job.transaction() is not available on this backend yet")
    yield  # pragma: no cover


_current: ContextVar[JobContext | None] = ContextVar("tenure_current_job", default=None)


def current_job() -> JobContext:
    """The attempt being run by the calling handler; TenureError outside one."""
    ctx = _current.get()
    if ctx is None:
        raise TenureError("tenure.current_job() is only available inside a running handler")
    return ctx


@contextmanager
def running(ctx: JobContext) -> Iterator[JobContext]:
    """Make ``ctx`` the current job for the code run inside the block."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
