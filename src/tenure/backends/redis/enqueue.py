"""Storing new jobs on Redis: bulk enqueue in pipelined runs, and periodic ticks.

Specs are cut into runs of one queue and the same options, each one call of
``enqueue.lua`` (which dedupes by key inside the queue's slot); the fleet's id
index gets each run's ids in the same pipeline, first, so that a rerun after a
lost reply finds them. A tick is ``enqueue_tick.lua``: the schedule's last
tick checked and moved with its job, atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from tenure.backends.base import Tick
from tenure.backends.redis import codec
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Arg, Call, Runner
from tenure.core.states import State
from tenure.job import Job, JobSpec

ENQUEUE_CHUNK = 500  # jobs per enqueue script call: bounds how long one call holds Redis
ENQUEUE_WINDOW = 2  # enqueue pipelines in flight at once


class Enqueue:
    """``enqueue``, ``enqueue_tick`` and ``last_ticks`` of the Redis backend,
    given specs already checked."""

    def __init__(self, runner: Runner, keys: Keys, index: Index) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        queues = list(dict.fromkeys(s.queue for s in specs))
        head = [Call.command("SADD", self.keys.queues, *queues)]
        runs = _runs(specs)
        pipelines = []
        for queue, run in runs:  # the index by id first: a rerun finds them
            each = any(s.concurrency_key != run[0].concurrency_key for s in run)
            args: list[Arg] = [queue, len(run), *codec.shared_args(run[0], each_keyed=each)]
            if each:  # jobs of several concurrency keys: each its own
                args += [a for s in run for a in (s.id, s.args, s.key or "",
                                                  s.concurrency_key or "")]  # fmt: skip
            else:
                args += [a for s in run for a in (s.id, s.args, s.key or "")]
            pipelines.append([*head, Call.command("HSET", self.keys.jobs,
                                                  *[x for s in run for x in (s.id, queue)]),
                              Call.script("enqueue", [self.keys.queue(queue)], args)])  # fmt: skip
            head = []
        jobs: list[Job] = []
        # Each run's jobs are made while Redis stores the next runs.
        async with contextlib.aclosing(self._pipelines(pipelines)) as replies:
            each_run = iter(runs)
            async for reply in replies:
                _, run = next(each_run)
                jobs += _enqueued(run, reply[-1])
        # The index got an entry for every spec; drop those that made no job.
        unused = [s.id for s, j in zip(specs, jobs, strict=True) if s.id != j.id]
        if unused:
            await self.runner.command("HDEL", self.keys.jobs, *unused)
        return self.index.known(jobs)

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        queue = spec.queue
        args: list[Arg] = [queue, 1, *codec.shared_args(spec), spec.id, spec.args,
                           spec.key or "", schedule, repr(at), spec.id]  # fmt: skip
        # Not repeatable: run again after a lost reply, it would find its own
        # tick and say None, and the index entry of its job would be dropped.
        reply = await self.runner.pipeline([
            Call.command("SADD", self.keys.queues, queue),
            Call.command("HSET", self.keys.jobs, spec.id, queue),
            Call.script("enqueue_tick", [self.keys.queue(queue)], args),
        ])  # fmt: skip
        if not reply[-1]:  # another worker's tick: no job, so no index entry
            await self.runner.command("HDEL", self.keys.jobs, spec.id)
            return None
        [job] = _enqueued([spec], reply[-1])
        return self.index.known([job])[0]

    async def last_ticks(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Tick]:
        by_queue: dict[str, list[str]] = {}
        for queue, name in pairs:
            by_queue.setdefault(queue, []).append(name)
        calls = [Call.command("HMGET", self.keys.queue(q) + "ticks", *names)
                 for q, names in by_queue.items()]  # fmt: skip
        replies = await self.runner.pipeline(calls, repeatable=True)
        found: dict[tuple[str, str], Tick] = {}
        for (queue, names), values in zip(by_queue.items(), replies, strict=True):
            for name, value in zip(names, values, strict=True):
                if value is not None:
                    at, job_id = value.decode().split(" ", 1)
                    found[queue, name] = Tick(float(at), job_id)
        return found

    async def _pipelines(
        self, pipelines: Sequence[Sequence[Call]]
    ) -> AsyncGenerator[list[Any], None]:
        """Run repeatable pipelines in order, yielding their replies as they come.
        On an ordered transport (the lane), up to ENQUEUE_WINDOW in flight:
        while Redis runs one, the next is sent, and the caller reads the last
        reply meanwhile. Else one at a time: on two pooled connections, a later
        one could run first."""
        run = functools.partial(self.runner.pipeline, repeatable=True)
        if len(pipelines) == 1:
            yield await run(pipelines[0])
            return
        window = ENQUEUE_WINDOW if self.runner.topology.transport.ordered else 1
        sent: deque[asyncio.Future[list[Any]]] = deque()
        try:
            for calls in pipelines:
                sent.append(asyncio.ensure_future(run(calls)))
                await asyncio.sleep(0)  # it writes its commands
                if len(sent) >= window:
                    yield await sent.popleft()
            while sent:
                yield await sent.popleft()
        finally:
            for pipeline in sent:  # an earlier one failed: the rest are not needed
                pipeline.cancel()
            await asyncio.gather(*sent, return_exceptions=True)


def _enqueued(specs: Sequence[JobSpec], reply: list[Any]) -> list[Job]:
    """The jobs of an enqueue script's reply, one per spec, in order."""
    created, *made = reply
    now = float(created)
    jobs = []
    for spec, entry in zip(specs, made, strict=True):
        if isinstance(entry, bytes):  # stored now: its run_at
            run_at = float(entry)
            state = State.SCHEDULED if run_at > now else State.QUEUED
            jobs.append(spec.stored(state, run_at, now))
        else:  # stored already: the job
            jobs.append(codec.job(entry))
    return jobs


def _runs(specs: Sequence[JobSpec]) -> list[tuple[str, list[JobSpec]]]:
    """Consecutive specs of one queue and the same options (all but id, args,
    key and concurrency_key), in chunks: one enqueue script call each, in order."""
    runs: list[tuple[str, list[JobSpec]]] = []
    last = None
    for spec in specs:
        options = spec.options()
        options = options[:8] + options[9:]  # but its concurrency_key
        if options == last and len(runs[-1][1]) < ENQUEUE_CHUNK:
            runs[-1][1].append(spec)
        else:
            runs.append((spec.queue, [spec]))
            last = options
    return runs
