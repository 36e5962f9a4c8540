"""The Redis backend: every transition one Lua script, one round trip per verb.

Jobs, queues, leases and workers live in the keys ``keys.py`` lays out; each
transition runs as one script (``scripts/*.lua``) on the keys of one queue,
atomically, judged by Redis's own clock (``TIME``). Worker liveness is a named
connection per registered worker (``liveness.py``); idle workers block on
per-queue signal lists (``wakeup.py``); the sweep runs in phases so that the
retry policy stays in ``tenure.core.retry`` (``rescue.py``).

A verb given only a job id finds the job's queue, hence its hash slot, in a
cache of the ids this backend has seen (those it enqueued, claimed or read), or
else in the fleet's id index, one extra round trip.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import logging
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncGenerator, Awaitable, Collection, Mapping, Sequence
from typing import Any

import orjson
from redis.exceptions import RedisError

from tenure.backends.base import (
    Capabilities,
    DerivedVerbs,
    LeaseRef,
    Page,
    Renewal,
    RescueReport,
    Tick,
    WorkerInfo,
)
from tenure.backends.checks import (
    bad_cursor,
    check_ago,
    check_cursor,
    check_listing,
    check_match,
    check_prune_limit,
    check_retried_by,
    check_schedules,
    check_tick,
    claim_limit,
    cursor_seq,
    not_cancellable,
    prefix_range,
    queue_busy,
)
from tenure.backends.redis import codec, retention
from tenure.backends.redis.events import EventReader
from tenure.backends.redis.keys import glob_escaped
from tenure.backends.redis.liveness import Liveness
from tenure.backends.redis.rescue import judge, rescue
from tenure.backends.redis.scripts import INVALID_TRANSITION, OK, Arg, Call, Runner, check
from tenure.backends.redis.topology import Topology
from tenure.backends.redis.url import Options, parse
from tenure.backends.redis.wakeup import Wakeups
from tenure.config import QueuePolicy
from tenure.core.events import Event, RetriedBy, failure_events
from tenure.core.names import NAME_PATTERN, check_job_id, check_job_ids, check_name
from tenure.core.payload import encode
from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import BackendUnavailable, InvalidInput, JobNotFound
from tenure.job import Job, JobSpec, check_specs

log = logging.getLogger("tenure.redis")

ENQUEUE_CHUNK = 500  # jobs per enqueue script call: bounds how long one call holds Redis
ENQUEUE_WINDOW = 2  # enqueue pipelines in flight at once
PROMOTE_MAX = 1000  # due scheduled jobs one claim promotes per queue
DELETE_PIECE = 1000  # jobs one delete_queue call deletes: bounds how long it holds Redis
DEAD_COUNT_PIECE = 5000  # dead jobs one dead_counts call looks at: bounds how long it holds Redis
MATCH_PIECE = 5000  # ids one HSCAN of match_ids looks at: bounds how long it holds Redis
ID_CACHE = 100_000  # job id -> queue entries this backend remembers
DEFAULTS = QueuePolicy()


class RedisBackend(DerivedVerbs):
    """Jobs in Redis (keys laid out for Redis Cluster). See the module docstring."""

    # A cycle is one script call: cheap, and it gains more from overlapping than filling.
    capabilities = Capabilities(remote=True, costly_cycles=False)
    transaction = None  # no database a handler writes to: no exactly-once effects here
    callers = None  # nor a caller's transaction to enqueue in

    def __init__(self, options: Options) -> None:
        self.url = options.url
        self.options = options
        self.keys = options.keys
        self.max_payload = options.max_payload
        self._safe_url = options.safe_url
        self._topology: Topology | None = None
        self._runner: Runner | None = None
        self._liveness: Liveness | None = None
        self._events: EventReader | None = None
        self._wakeups: dict[tuple[str, ...], Wakeups] = {}
        self._queue_of_id: OrderedDict[str, str] = OrderedDict()
        self._warned_durability = False

    @classmethod
    def from_url(cls, url: str) -> RedisBackend:
        """A backend (not open yet) for a ``redis://``, ``rediss://`` or ``unix://``
        URL; see ``url.py`` for the options."""
        return cls(parse(url))

    # -- plumbing ----------------------------------------------------------

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        return self._runner

    async def open(self) -> None:
        if self._runner is not None:
            return
        try:
            topology = Topology(self.options)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"bad Redis URL {self._safe_url!r}: {exc}") from None
        runner = Runner(topology, self._safe_url)
        try:
            await topology.open()
            await runner.load()
        except (BackendUnavailable, RedisError, OSError) as exc:
            await topology.close()
            if isinstance(exc, BackendUnavailable):
                raise
            raise BackendUnavailable(f"Redis at {self._safe_url}: {exc}") from exc
        self._topology, self._runner = topology, runner
        self._liveness = Liveness(self.keys, runner)
        self._events = EventReader(runner, self.keys)

    async def close(self) -> None:
        if self._liveness is not None:
            await self._liveness.close()  # no deregistering: to the fleet, a kill -9
        for wakeups in self._wakeups.values():
            await wakeups.close()
        if self._topology is not None:
            await self._topology.close()
        self._topology = self._runner = self._liveness = self._events = None
        self._wakeups = {}

    def _remember(self, queue_of_id: Mapping[str, str]) -> None:
        """Cache job id -> queue; the oldest entries go first (new ids go last)."""
        cache = self._queue_of_id
        cache.update(queue_of_id)
        while len(cache) > ID_CACHE:
            cache.popitem(last=False)

    def _known(self, jobs: Sequence[Job]) -> list[Job]:
        self._remember({job.id: job.queue for job in jobs})
        return list(jobs)

    async def _queues_of(self, job_ids: Collection[str]) -> dict[str, str]:
        """The queue of each job id that exists (cache, else the fleet's index)."""
        found = {i: q for i in job_ids if (q := self._queue_of_id.get(i)) is not None}
        unknown = [i for i in job_ids if i not in found]
        if unknown:
            queues = await self.runner.command("HMGET", self.keys.jobs, *unknown, repeatable=True)
            fetched = {i: q.decode() for i, q in zip(unknown, queues, strict=True) if q is not None}
            self._remember(fetched)
            found.update(fetched)
        return found

    async def _queue_of(self, job_id: str) -> str:
        queue = (await self._queues_of([job_id])).get(job_id)
        if queue is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return queue

    async def _settle(
        self, script: str, job_id: str, fence: int, *args: str | bytes, repeatable: bool = False
    ) -> None:
        """Run one fence-checked script on a job; LeaseLost or JobNotFound if refused."""
        queue = await self._queue_of(job_id)
        keys, argv = [self.keys.queue(queue)], [job_id, fence, *args]
        code = await self.runner.call(script, keys, argv, repeatable=repeatable)
        check(code, job_id, fence)

    # -- producers ---------------------------------------------------------

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        queues = list(dict.fromkeys(s.queue for s in specs))
        head = [Call.command("SADD", self.keys.queues, *queues)]
        runs = _runs(specs)
        pipelines = []
        for queue, run in runs:  # the index by id first: a rerun finds them
            args: list[Arg] = [queue, len(run), *codec.shared_args(run[0])]
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
        return self._known(jobs)

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
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
        return self._known([job])[0]

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        pairs = check_schedules(schedules)
        by_queue: dict[str, builtins.list[str]] = {}
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
        run = functools.partial(self.runner.pipeline, repeatable=True, hot=True)
        if len(pipelines) == 1:
            yield await run(pipelines[0])
            return
        window = ENQUEUE_WINDOW if self.runner.topology.hot.ordered else 1
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

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' signal lists (BLPOP) until a token or the timeout.
        On Redis Cluster the lists live on several nodes: one pop per queue, and
        the first token wins."""
        if self._topology is None or not queues:
            return
        lists = tuple(self.keys.signal(q) for q in dict.fromkeys(queues))
        groups = [(key,) for key in lists] if self._topology.cluster else [lists]
        waits = [asyncio.ensure_future(self._waiter(g).wait(g, timeout)) for g in groups]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()  # a pending pop outlives its wait: the next wait picks it up

    def _waiter(self, lists: tuple[str, ...]) -> Wakeups:
        if lists not in self._wakeups:
            topology = self._topology
            assert topology is not None
            self._wakeups[lists] = Wakeups(lambda: topology.connection(lists[0]))
        return self._wakeups[lists]

    # -- lease holders -----------------------------------------------------

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], builtins.list[Job]]:
        """One script (cycle.lua) for the completions and the claim; on Redis
        Cluster, one script per queue and the claim, in one pipeline."""
        limit = claim_limit(queues, limit)
        lost: set[LeaseRef] = set()
        batches: dict[str, list[tuple[str, int, bytes]]] = {}
        if items:
            queue_of = await self._queues_of({job_id for job_id, _, _ in items})
            lost = {(job_id, fence) for job_id, fence, _ in items if job_id not in queue_of}
            for item in items:
                if item[0] in queue_of:
                    batches.setdefault(queue_of[item[0]], []).append(item)
        if limit and self._liveness is not None and self._liveness.seems_lost(worker_id):
            # Claimed under an identity the fleet already takes for dead, a job
            # would be recovered from under us: the next heartbeat registers us again.
            # (Checked after the round trip above, which may have spanned a restart.)
            limit = 0
        queues = list(dict.fromkeys(queues)) if limit else []
        if not batches and not queues:
            return lost, []
        skip = orjson.dumps(list(skip_tasks)).decode() if skip_tasks else ""
        claim: list[str | int] = [
            worker_id, limit, repr(DEFAULTS.lease_ttl), DEFAULTS.delivery, PROMOTE_MAX, skip
        ]  # fmt: skip
        if self.runner.topology.cluster:
            statuses, claimed = await self._cycle_on_cluster(batches, queues, claim)
        else:
            keys = [self.keys.queue(q) for q in (*queues, *batches)]
            args: list[str | int | bytes] = [*claim, len(queues)]
            for batch in batches.values():
                args += [len(batch), *(a for item in batch for a in item)]
            claimed, statuses = await self.runner.call("cycle", keys, args, hot=True)
        for batch, codes in zip(batches.values(), statuses, strict=True):
            lost |= {(i, f) for (i, f, _), code in zip(batch, codes, strict=True) if code != OK}
        jobs = [codec.job_of_values(values) for values in claimed]
        if self.runner.topology.cluster and len(queues) > 1:  # claimed queue by queue: in line
            jobs.sort(key=lambda j: (-j.priority, j.run_at, j.created_at, j.id))
        return lost, self._known(jobs)

    async def _cycle_on_cluster(
        self,
        batches: dict[str, builtins.list[tuple[str, int, bytes]]],
        queues: builtins.list[str],
        claim: builtins.list[str | int],
    ) -> tuple[builtins.list[Any], builtins.list[Any]]:
        """complete.lua per queue and claim.lua per queue (each in its hash slot)."""
        calls = [
            Call.script("complete", [self.keys.queue(q)], [a for item in batch for a in item])
            for q, batch in batches.items()
        ]
        if queues:
            shares = {q: int(claim[1]) for q in queues}
            if len(shares) > 1:
                shares = await self._shares(queues, int(claim[1]), str(claim[5]))
            calls += [
                Call.script("claim", [self.keys.queue(q)], [claim[0], n, *claim[2:]])
                for q, n in shares.items() if n > 0
            ]  # fmt: skip
        replies = await self.runner.pipeline(calls)
        return replies[: len(batches)], [flat for r in replies[len(batches) :] for flat in r]

    async def _shares(self, queues: builtins.list[str], limit: int, skip: str) -> dict[str, int]:
        """How many jobs to claim from each queue so that the batch is the best
        ``limit`` across them (Cluster: a peek per queue, then a claim per queue;
        a job another worker takes in between leaves this batch short)."""
        calls = [Call.script("peek", [self.keys.queue(q)], [limit, PROMOTE_MAX, skip])
                 for q in queues]  # fmt: skip
        candidates = []
        for queue, reply in zip(queues, await self.runner.pipeline(calls), strict=True):
            candidates += [(float(reply[i + 1]), reply[i], queue) for i in range(0, len(reply), 2)]
        shares = dict.fromkeys(queues, 0)
        for _, _, queue in sorted(candidates)[:limit]:
            shares[queue] += 1
        return shares

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        """Renew the presented leases the worker still holds, one script per queue,
        in one round trip. For a worker registered by this backend it also proves
        the worker alive: its named connection answers a PING (at the same time)
        and its registry entry is still there; LivenessLost otherwise."""
        presented = set(leases)
        here = self._liveness is not None and worker_id in self._liveness.held
        if not presented and not here:
            return Renewal()
        queue_of = await self._queues_of({job_id for job_id, _ in presented})
        by_queue: dict[str, list[str | int]] = {}
        for job_id, fence in presented:
            if job_id in queue_of:
                by_queue.setdefault(queue_of[job_id], [worker_id]).extend((job_id, fence))
        calls = [Call.script("heartbeat", [self.keys.queue(q)], a) for q, a in by_queue.items()]
        if here:
            calls.append(Call.script("touch", [self.keys.fleet], [worker_id]))
        replies = await self._with_liveness(worker_id, self.runner.pipeline(calls))
        if here and not int(replies.pop()):
            assert self._liveness is not None
            await self._liveness.lost(worker_id, "a sweeper found it gone and buried it")
        held, cancel_requested = set(), set()
        for reply in replies:
            for i in range(0, len(reply), 3):
                lease = (reply[i].decode(), int(reply[i + 1]))
                held.add(lease)
                if int(reply[i + 2]):
                    cancel_requested.add(lease)
        return Renewal(frozenset(presented - held), frozenset(cancel_requested))

    async def _with_liveness(self, worker_id: str, work: Awaitable[list[Any]]) -> list[Any]:
        """Await ``work`` and, at the same time, the check of the worker's connection;
        a lost liveness wins over any other error."""
        assert self._liveness is not None
        checked, done = await asyncio.gather(
            self._liveness.check(worker_id), work, return_exceptions=True
        )
        for outcome in (checked, done):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(done, list)
        return done

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload)
        await self._settle("progress", job_id, fence, payload, repeatable=True)

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload)
        queue = await self._queue_of(job_id)
        [code] = await self.runner.call(
            "complete", [self.keys.queue(queue)], [job_id, fence, payload]
        )
        check(code, job_id, fence)

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        reason = decision.dead_reason.value if decision.dead_reason else ""
        await self._settle(
            "fail", job_id, fence, Outcome(outcome).value, "" if error is None else "=" + error,
            decision.state.value, repr(float(decision.delay)), reason,
            "1" if decision.stall else "0",
            orjson.dumps(failure_events(outcome, decision, rescued=False)),
            orjson.dumps(failure_events(outcome, CANCELLED, rescued=False)),
        )  # fmt: skip

    async def release(self, job_id: str, fence: int) -> None:
        await self._settle("release", job_id, fence)

    # -- the sweeper -------------------------------------------------------

    @property
    def liveness(self) -> Liveness:
        if self._liveness is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        return self._liveness

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        report = await rescue(self.runner, self.keys, self.liveness, min_interval)
        if report.swept and self._events is not None and self._events.trim_due():
            queues = await self.queues()
            await self._events.trim(queues, {q: await self.get_policy(q) for q in queues})
        return report

    async def prune(self, limit: int) -> int:
        gone = await retention.prune(self.runner, self.keys, check_prune_limit(limit))
        for job_id in gone:
            self._queue_of_id.pop(job_id, None)
        return len(gone)

    # -- lifecycle events --------------------------------------------------

    async def read_events(
        self, queue: str | None, after: str | None, limit: int, timeout: float = 0.0
    ) -> builtins.list[Event]:
        if self._events is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        return await self._events.read(queue, after, limit, timeout)

    async def events_now(self, queue: str | None, ago: float = 0.0) -> str:
        if self._events is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        return await self._events.now(queue, check_ago(ago))

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        queue = await self._queue_of(check_job_id(job_id))
        code, *rest = await self.runner.call("cancel", [self.keys.queue(queue)], [job_id])
        if code == INVALID_TRANSITION:
            raise not_cancellable(await self.get(job_id))
        check(code, job_id)
        return codec.job(*rest)

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        retried_by = check_retried_by(by).value
        if ids is not None and not ids:
            return 0
        args = [retried_by, *(ids or [])]
        return int(await self.runner.call("retry_dead", [self.keys.queue(queue)], args))

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        if ids is not None and not ids:
            return 0
        ids = ids or []
        gone = await self.runner.call("purge_dead", [self.keys.queue(queue)], ids)
        if gone:
            await self.runner.command("HDEL", self.keys.jobs, *gone)
            for job_id in gone:
                self._queue_of_id.pop(job_id.decode(), None)
        return len(gone)

    async def delete_queue(self, queue: str) -> int:
        """delete_queue.lua, a piece at a time, then the queue's name."""
        check_name("queue", queue)
        deleted = 0
        while True:
            code, left, *ids = await self.runner.call(
                "delete_queue", [self.keys.queue(queue)], [DELETE_PIECE]
            )
            if code == INVALID_TRANSITION:
                raise queue_busy(queue, int(left))
            if not ids:
                break
            await self.runner.command("HDEL", self.keys.jobs, *ids)
            for job_id in ids:
                self._queue_of_id.pop(job_id.decode(), None)
            deleted += len(ids)
        await self.runner.command("SREM", self.keys.queues, queue)
        return deleted

    async def get(self, job_id: str) -> Job:
        queue = await self._queue_of(check_job_id(job_id))
        keys = [self.keys.queue(queue)]
        flat, history = await self.runner.call("get", keys, [job_id], repeatable=True)
        if not flat:
            raise JobNotFound(f"no job with id {job_id!r}")
        return codec.job(flat, history)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        if prefix_range(prefix) is None:
            return []
        pattern = glob_escaped(prefix) + "*"
        found: set[str] = set()
        cursor: bytes | int = 0
        while True:  # one bounded HSCAN a round trip, until the hash is done or limit is met
            cursor, pairs = await self.runner.command(
                "HSCAN", self.keys.jobs, cursor, "MATCH", pattern, "COUNT", MATCH_PIECE,
                repeatable=True,
            )  # fmt: skip
            names = pairs if isinstance(pairs, dict) else pairs[::2]  # as redis-py parses it
            found.update(i.decode() for i in names)
            if int(cursor) == 0 or len(found) >= limit:
                return sorted(found)[:limit]

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        cursor = _cursor(after)
        queues = [queue] if queue is not None else await self.queues()
        calls = []
        for q in queues:
            # newest first by (seq, queue): below the cursor's seq, or at it in a lower queue
            bound = "+inf" if cursor is None else f"({cursor[0]}"
            if cursor is not None and q < cursor[1]:
                bound = str(cursor[0])
            args = [state.value if state else "", bound, limit + 1]
            calls.append(Call.script("list", [self.keys.queue(q)], args))
        rows = []
        replies = await self.runner.pipeline(calls, repeatable=True)
        for q, reply in zip(queues, replies, strict=True):
            rows += [(int(reply[i]), q, reply[i + 1]) for i in range(0, len(reply), 2)]
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
        jobs = self._known([codec.job(flat) for _, _, flat in rows[:limit]])
        last = rows[limit - 1] if len(rows) > limit else None
        return Page(jobs, None if last is None else f"{last[0]}:{last[1]}")

    async def counts(self, queue: str) -> dict[State, int]:
        check_name("queue", queue)
        states = list(State)
        names = [s.value for s in states]
        reply = await self.runner.call("counts", [self.keys.queue(queue)], names, repeatable=True)
        return {s: int(n) for s, n in zip(states, reply, strict=True)}

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        check_name("queue", queue)
        counted: Counter[str] = Counter()
        after: str | None = ""
        while after is not None:
            reply = await self.runner.call(
                "dead_counts", [self.keys.queue(queue)], [after, DEAD_COUNT_PIECE], repeatable=True
            )
            for reason, n in zip(reply[1::2], reply[2::2], strict=True):
                counted[reason.decode()] += int(n)
            after = reply[0].decode() or None
        return {DeadReason(reason): n for reason, n in counted.items()}

    async def lag(self, queue: str) -> float:
        check_name("queue", queue)
        return float(await self.runner.call("lag", [self.keys.queue(queue)], [], repeatable=True))

    async def queues(self) -> builtins.list[str]:
        members = await self.runner.command("SMEMBERS", self.keys.queues, repeatable=True)
        return sorted(m.decode() for m in members)

    async def get_policy(self, queue: str) -> QueuePolicy:
        check_name("queue", queue)
        raw = await self.runner.command("GET", self.keys.policy(queue), repeatable=True)
        return DEFAULTS if raw is None else QueuePolicy.from_json(raw)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        await self.runner.pipeline([
            Call.command("SADD", self.keys.queues, queue),
            Call.command("SET", self.keys.policy(queue), orjson.dumps(policy.to_dict())),
        ], repeatable=True)  # fmt: skip

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        """Read, merge, then store only if nothing changed meanwhile (a compare
        and set in change_policy.lua), else again."""
        check_name("queue", queue)
        key = self.keys.policy(queue)
        while True:
            stored = await self.runner.command("GET", key, repeatable=True)
            policy = QueuePolicy.from_json(stored).replace(**changes)  # InvalidInput: no change
            new = orjson.dumps(policy.to_dict())
            prefix = [self.keys.queue(queue)]
            if await self.runner.call("change_policy", prefix, [stored or b"", new],
                                      repeatable=True):  # fmt: skip
                await self.runner.command("SADD", self.keys.queues, queue, repeatable=True)
                return policy

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        check_name("worker", info.id)
        if self._liveness is None:
            raise BackendUnavailable(f"the Redis backend at {self._safe_url} is not open")
        await self._warn_if_volatile()
        entry = {"hostname": info.hostname, "pid": info.pid, "queues": list(info.queues)}
        await self._liveness.hold(info.id, entry)

    async def deregister_worker(self, worker_id: str) -> None:
        held = self._liveness.release(worker_id) if self._liveness else None
        await self.runner.call("deregister", [self.keys.fleet], [worker_id])
        if held is not None and self._liveness is not None:
            await self._liveness.drop(held, kill=False)

    async def workers(self) -> builtins.list[WorkerInfo]:
        registry = await self.runner.call("workers", [self.keys.fleet], repeatable=True)
        entries = registry[1:]
        ids = [worker_id.decode() for worker_id, *_ in entries]
        leases = await self._leases_held(ids)
        _, live = judge(registry, self.liveness.names(await self.liveness.everywhere()))
        found = []
        for worker_id, (_, info, started_at, last_seen) in zip(ids, entries, strict=True):
            data = orjson.loads(info)
            found.append(
                WorkerInfo(worker_id, data["hostname"], int(data["pid"]), tuple(data["queues"]),
                           float(started_at), float(last_seen), leases.get(worker_id, 0),
                           worker_id in live)
            )  # fmt: skip
        return sorted(found, key=lambda w: (w.started_at, w.id))

    async def _leases_held(self, worker_ids: builtins.list[str]) -> dict[str, int]:
        """Active jobs each worker holds: the sizes of its held sets, one per
        queue (each in its queue's hash slot), in one round trip."""
        queues = await self.queues()
        pairs = [(w, q) for w in worker_ids for q in queues]
        if not pairs:
            return {}
        calls = [Call.command("SCARD", self.keys.queue(q) + f"held:{w}") for w, q in pairs]
        sizes = await self.runner.pipeline(calls, repeatable=True)
        held: dict[str, int] = {}
        for (w, _), n in zip(pairs, sizes, strict=True):
            held[w] = held.get(w, 0) + int(n)
        return held

    async def _warn_if_volatile(self) -> None:
        """Once per backend: a server without AOF loses jobs when it restarts."""
        if self._warned_durability:
            return
        self._warned_durability = True
        try:
            info = await self.runner.command("INFO", "persistence")
        except BackendUnavailable:
            return  # INFO may be forbidden: say nothing rather than guess
        nodes = info.values() if isinstance(info, dict) and "aof_enabled" not in info else [info]
        if any(isinstance(n, dict) and not int(n.get("aof_enabled", 1)) for n in nodes):
            log.warning(
                "Redis at %s runs with appendonly no: a Redis restart loses jobs "
                "(see docs/redis.md: appendonly yes, appendfsync everysec)",
                self._safe_url,
            )


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
    """Consecutive specs of one queue and the same options (all but id, args and
    key), in chunks: one enqueue script call each, in order."""
    runs: list[tuple[str, list[JobSpec]]] = []
    last = None
    for spec in specs:
        options = spec.options()
        if options == last and len(runs[-1][1]) < ENQUEUE_CHUNK:
            runs[-1][1].append(spec)
        else:
            runs.append((spec.queue, [spec]))
            last = options
    return runs


def _cursor(after: str | None) -> tuple[int, str] | None:
    """A cursor of this backend: ``seq:queue``."""
    if (after := check_cursor(after)) is None:
        return None
    seq, _, queue = after.partition(":")
    if NAME_PATTERN.fullmatch(queue) is None:
        raise bad_cursor(after)
    return cursor_seq(seq), queue
