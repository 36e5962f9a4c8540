"""One exception tree for everything tenure raises on purpose.

Every error a user can act on is a :class:`TenureError`; its message says what
was wrong and what to do about it.

The bottom layer: this module imports nothing of tenure while it loads (the
type checker reads types; ``Retry`` and ``Fail`` are fetched on first use),
so that every other module can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenure.core.states import DeadReason
    from tenure.job import Job
    from tenure.signals import Fail, Retry

__all__ = [
    "AmbiguousJobId",
    "BackendUnavailable",
    "Fail",
    "InvalidInput",
    "InvalidTransition",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "LeaseLost",
    "LivenessLost",
    "Retry",
    "ServerFull",
    "StorageLost",
    "TenureError",
]


class TenureError(Exception):
    """Base of every error tenure raises on purpose."""


class InvalidInput(TenureError, ValueError):
    """Bad input: a malformed name, URL, payload or argument. Nothing was stored."""


class InvalidTransition(InvalidInput):
    """The job is not in a state that allows this operation (e.g. cancelling an active job)."""


class JobNotFound(TenureError, LookupError):
    """No job with this id exists in storage."""


class AmbiguousJobId(InvalidInput):
    """A prefix of job ids that names more than one job: ``matches`` holds
    some of their ids (up to ten; the message says when there are more)."""

    def __init__(self, prefix: str, matches: list[str], more: bool) -> None:
        self.prefix = prefix
        self.matches = matches
        self.more = more
        listed = ", ".join(matches) + (", ..." if more else "")
        super().__init__(
            f"job id prefix {prefix!r} is ambiguous: it begins the ids of {listed}; "
            "give more characters"
        )

    def __reduce__(self) -> tuple[type[AmbiguousJobId], tuple[str, list[str], bool]]:
        return type(self), (self.prefix, self.matches, self.more)


class JobFailed(TenureError):
    """The job awaited (``App.result``) is dead: ``dead_reason`` says why, and
    ``error`` holds its last attempt's error (a traceback, for a handler's
    exception). ``job`` is the job as storage holds it."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.dead_reason: DeadReason | None = job.dead_reason
        self.error: str | None = job.error
        reason = job.dead_reason.value if job.dead_reason is not None else "unknown"
        last = (job.error or "").strip().splitlines()
        said = f": {last[-1]}" if last else ""
        super().__init__(f"job {job.id} ({job.task}) is dead ({reason}){said}")

    def __reduce__(self) -> tuple[type[JobFailed], tuple[Job]]:
        return type(self), (self.job,)


class JobCancelled(TenureError):
    """The job awaited (``App.result``) was cancelled before it ran to completion."""

    def __init__(self, job: Job) -> None:
        self.job = job
        super().__init__(f"job {job.id} ({job.task}) was cancelled")

    def __reduce__(self) -> tuple[type[JobCancelled], tuple[Job]]:
        return type(self), (self.job,)


class LeaseLost(TenureError):
    """A write about an attempt presented a stale fence: the job was recovered
    and another attempt (or nobody) now owns it. Nothing was changed."""


class BackendUnavailable(TenureError):
    """Storage cannot be reached, opened or written."""


class ServerFull(BackendUnavailable):
    """The storage server refused a connection: it has all it admits
    (PostgreSQL's ``max_connections``). A starting worker gives back what it
    holds and waits for one to free, however long, rather than exit."""


class LivenessLost(BackendUnavailable):
    """The storage no longer sees this worker as alive (its liveness connection or
    lock is gone): to the fleet it died, and its leases may be recovered at any
    moment. The worker stops those attempts and registers again under a new id."""


class StorageLost(TenureError):
    """The storage this process opened is gone for good: a SQLite file deleted,
    replaced by another file, or no longer a database. Going on would read and
    write where nobody else does, so a worker stops; it is not retried."""


def __getattr__(name: str) -> object:
    """``Retry`` and ``Fail``, the handler signals, at their old address: they
    live in :mod:`tenure.signals`, which needs this module first, so they are
    fetched on first use rather than imported while this module loads."""
    if name in ("Retry", "Fail"):
        from tenure import signals

        return getattr(signals, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
