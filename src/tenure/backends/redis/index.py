"""The fleet's indexes: which queues exist, and which queue a job id is in.

A verb given only a job id finds the job's queue, hence its hash slot, in a
cache of the ids this backend has seen (those it enqueued, claimed or read), or
else in the fleet's id index (``jobs`` in ``keys.py``), one extra round trip.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence

from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Runner
from tenure.errors import JobNotFound
from tenure.job import Job

ID_CACHE = 100_000  # job id -> queue entries a backend remembers

# A backend's cache of job id -> queue, oldest first; it outlives a close.
IdCache = OrderedDict[str, str]


class Index:
    """The fleet's queue names and job id index, and this backend's cache of it."""

    def __init__(self, runner: Runner, keys: Keys, cache: IdCache) -> None:
        self.runner = runner
        self.keys = keys
        self.cache = cache

    async def queues(self) -> list[str]:
        members = await self.runner.command("SMEMBERS", self.keys.queues, repeatable=True)
        return sorted(m.decode() for m in members)

    def remember(self, queue_of_id: Mapping[str, str]) -> None:
        """Cache job id -> queue; the oldest entries go first (new ids go last)."""
        cache = self.cache
        cache.update(queue_of_id)
        while len(cache) > ID_CACHE:
            cache.popitem(last=False)

    def known(self, jobs: Sequence[Job]) -> list[Job]:
        """``jobs``, their queues remembered."""
        self.remember({job.id: job.queue for job in jobs})
        return list(jobs)

    def forget(self, job_ids: Iterable[str | bytes]) -> None:
        """Drop the ids of jobs deleted."""
        for job_id in job_ids:
            self.cache.pop(job_id if isinstance(job_id, str) else job_id.decode(), None)

    async def queues_of(self, job_ids: Collection[str]) -> dict[str, str]:
        """The queue of each job id that exists (cache, else the fleet's index)."""
        found = {i: q for i in job_ids if (q := self.cache.get(i)) is not None}
        unknown = [i for i in job_ids if i not in found]
        if unknown:
            queues = await self.runner.command("HMGET", self.keys.jobs, *unknown, repeatable=True)
            fetched = {i: q.decode() for i, q in zip(unknown, queues, strict=True) if q is not None}
            self.remember(fetched)
            found.update(fetched)
        return found

    async def queue_of(self, job_id: str) -> str:
        queue = (await self.queues_of([job_id])).get(job_id)
        if queue is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return queue
