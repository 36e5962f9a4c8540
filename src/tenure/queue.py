"""One queue of an App: its counts, its policy and its dead-letter queue.

A facade over the App's backend: each method ``aname`` runs on the caller's
event loop, its twin ``name`` through the App's sync facade.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tenure.backends.base import Page
from tenure.backends.checks import check_listing
from tenure.config import QueuePolicy
from tenure.core.limits import KeyCount
from tenure.core.names import check_job_ids, check_name
from tenure.core.states import State

if TYPE_CHECKING:
    from tenure.app import App

__all__ = ["Queue"]


class Queue:
    """One queue of an App: counts, policy and its dead-letter queue."""

    def __init__(self, app: App, name: str) -> None:
        self.app = app
        self.name = check_name("queue", name)

    def counts(self) -> dict[State, int]:
        return self.app.call(self.acounts())

    async def acounts(self) -> dict[State, int]:
        return await (await self.app.abackend()).counts(self.name)

    def policy(self) -> QueuePolicy:
        return self.app.call(self.apolicy())

    async def apolicy(self) -> QueuePolicy:
        return await (await self.app.abackend()).get_policy(self.name)

    def set_policy(self, **changes: Any) -> QueuePolicy:
        """Change some fields of the stored policy, atomically (a concurrent
        change of other fields is kept); every worker reads it."""
        return self.app.call(self.aset_policy(**changes))

    async def aset_policy(self, **changes: Any) -> QueuePolicy:
        return await (await self.app.abackend()).change_policy(self.name, changes)

    def pause(self) -> QueuePolicy:
        """Stop every worker claiming from this queue (its claims check it, so
        at once); enqueues still land, and running attempts finish."""
        return self.set_policy(paused=True)

    async def apause(self) -> QueuePolicy:
        return await self.aset_policy(paused=True)

    def resume(self) -> QueuePolicy:
        """Let workers claim from this queue again; idle ones wake."""
        return self.set_policy(paused=False)

    async def aresume(self) -> QueuePolicy:
        return await self.aset_policy(paused=False)

    def key_counts(self, limit: int = 1000) -> list[KeyCount]:
        """The concurrency keys with queued or active jobs (None: the jobs
        without one), busiest first: at most ``limit``, within [1, 10000]."""
        return self.app.call(self.akey_counts(limit))

    async def akey_counts(self, limit: int = 1000) -> list[KeyCount]:
        check_listing(self.name, None, limit)
        return await (await self.app.abackend()).key_counts(self.name, limit)

    def delete(self) -> int:
        """Delete this queue: its jobs in every state with their history, its
        policy and its events; returns how many jobs went. Refused
        (InvalidTransition) while any of its jobs is active: pause it first."""
        return self.app.call(self.adelete())

    async def adelete(self) -> int:
        return await (await self.app.abackend()).delete_queue(self.name)

    def jobs(
        self, state: State | str | None = None, limit: int = 50, after: str | None = None
    ) -> Page:
        return self.app.jobs(self.name, state, limit, after)

    async def ajobs(
        self, state: State | str | None = None, limit: int = 50, after: str | None = None
    ) -> Page:
        return await self.app.ajobs(self.name, state, limit, after)

    def dead(self, limit: int = 50, after: str | None = None) -> Page:
        """A page of the dead-letter queue, newest first."""
        return self.jobs(State.DEAD, limit, after)

    async def adead(self, limit: int = 50, after: str | None = None) -> Page:
        return await self.ajobs(State.DEAD, limit, after)

    def retry_dead(self, job_ids: Iterable[str] | None = None, *, by: str = "python") -> int:
        """Requeue dead jobs (all when ``job_ids`` is None) with their budgets
        reset; their attempts keep counting, and each gets a ``retried`` event
        saying ``by`` whom (``tenure.core.events.RetriedBy``)."""
        return self.app.call(self.aretry_dead(job_ids, by=by))

    async def aretry_dead(self, job_ids: Iterable[str] | None = None, *, by: str = "python") -> int:
        ids = check_job_ids(job_ids)
        return await (await self.app.abackend()).retry_dead(self.name, ids, by)

    def purge_dead(self, job_ids: Iterable[str] | None = None) -> int:
        """Delete dead jobs (all when ``job_ids`` is None)."""
        return self.app.call(self.apurge_dead(job_ids))

    async def apurge_dead(self, job_ids: Iterable[str] | None = None) -> int:
        ids = check_job_ids(job_ids)
        return await (await self.app.abackend()).purge_dead(self.name, ids)
