"""The sweeper's work on Redis: the sweep, in phases, so that the retry policy
stays in Python, and retention (the prune).

1. The guard (``guard.py``): one sweep per interval across the fleet. While no
   worker holds a lease anywhere (every queue's ``holders`` set is empty: one
   ``EXISTS``), nothing can need recovering, and a sweep is a whole one only
   every FULL_EVERY seconds (for promotions no idle worker's wait made, a
   relay's leftovers, workflows abandoned while pending, registry entries to
   bury, retention, which the prune after a sweep of nothing skips): an idle
   fleet costs Redis a few commands a second.
   Jobs that come due are promoted meanwhile by the claims of the idle
   workers woken for them (``wakeup.py``).
2. One pipeline: per queue, ``sweep.lua`` promotes due scheduled jobs and
   returns the expired leases and the workers holding leases; then the
   registry, read after those holders (a holder registered before it claimed,
   so a live one is in the registry read after it). Then ``CLIENT LIST``, in a
   round trip of its own after the registry (a worker connects before it
   registers, so a live one is in it).
3. Workers registered but without their named connection are buried
   (``deregister.lua``); ``orphans.lua`` returns the jobs that gone or
   unregistered holders hold.
4. :func:`tenure.core.retry.decide_for` decides each candidate's fate; per queue,
   ``recover.lua`` applies the decisions, each fence-checked and checked again
   for what made it a candidate (a late heartbeat saves a lease).

Cost: the jobs recovered and the workers, never the size of the queues.

A swept sweeper also trims the queues' event streams by age, once a minute
(``events.py``).

Retention: a queue's finished jobs are indexed by when they finished
(``retained:*``), so a prune reads only the jobs it deletes. One prune deletes
at most ``limit`` jobs in all, however many queues have some due: a pipeline
first counts those due in each queue (O(log n) each). Then each queue's share
goes in script calls of at most SCRIPT_MAX jobs, one round trip each: Redis
serves nobody else while a script runs, nor between the calls of one pipeline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tenure.backends.base import Rescued, RescueReport
from tenure.backends.checks import last_proof
from tenure.backends.redis import codec
from tenure.backends.redis.events import EventReader
from tenure.backends.redis.guard import Guard
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.liveness import Liveness, judge
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.scripts import Call, Runner
from tenure.config import QueuePolicy
from tenure.core.events import failure_events
from tenure.core.retry import CANCELLED, decide_for
from tenure.core.states import Outcome, State
from tenure.job import Job

BATCH = 1000  # promotions and candidates per queue and sweep; the rest wait one sweep
PENDING_MAX = 60.0  # seconds a workflow may stay pending before it is taken for abandoned
FULL_EVERY = 60.0  # seconds: a whole sweep at least this often, even with no lease held
SCRIPT_MAX = 250  # jobs per prune.lua call: about a millisecond of Redis (docs/benchmarks.md)
DEFAULTS = QueuePolicy()


# A candidate for recovery: the job, and when its lease was last renewed.
Found = tuple[Job, float | None]


@dataclass
class QueueSweep:
    """What phase 2 found in one queue."""

    queue: str
    promoted: int
    holders: set[str]
    policy: QueuePolicy
    expired: list[Found]
    outbox: int = 0  # messages left in its outbox (relay.py)
    abandoned: list[str] = field(default_factory=list)  # workflows (flows.py: drop)
    orphaned: list[Found] = field(default_factory=list)


class Rescue:
    """``rescue`` and ``prune`` of the Redis backend."""

    def __init__(
        self,
        runner: Runner,
        keys: Keys,
        index: Index,
        liveness: Liveness,
        *,
        events: EventReader,
        policy_of: Callable[[str], Awaitable[QueuePolicy]],
        relay: Relay,
        drop: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.liveness = liveness
        self.events = events
        self.policy_of = policy_of  # a queue's policy, for its events' retention
        self.relay = relay
        self.drop = drop  # a workflow abandoned while pending, by home queue and id
        self.guard = Guard(runner, keys)
        self._swept_at = -math.inf  # monotonic: this process's last whole sweep
        self._prune_next = True  # False after a sweep that found nothing held (see prune)

    async def rescue(self, min_interval: float) -> RescueReport:
        retry_in = await self.guard.enter(min_interval)
        if retry_in is not None:
            return RescueReport(swept=False, retry_in=retry_in)
        queues = await self.index.queues()
        whole = min_interval <= 0 or time.monotonic() - self._swept_at >= FULL_EVERY
        self._prune_next = whole
        if not whole and not await self._leases_held(queues):
            return RescueReport(swept=True)  # nothing held: nothing to recover
        self._swept_at = time.monotonic()
        report, sweeps, relays, now = await sweep(self.runner, self.keys, self.liveness, queues)
        self.guard.clock.read(now)
        # Workflows: what a relay that died left in an outbox, and what a
        # producer that died left pending.
        await self.relay.relay([*relays, *(self.keys.queue(s.queue) for s in sweeps if s.outbox)])
        for s in sweeps:
            for workflow_id in s.abandoned:
                await self.drop(s.queue, workflow_id)
        if report.swept and self.events.trim_due():
            queues = await self.index.queues()
            await self.events.trim(queues, {q: await self.policy_of(q) for q in queues})
        return report

    async def _leases_held(self, queues: list[str]) -> bool:
        """Whether any worker holds a lease in any queue (on Cluster, where the
        queues' keys are in several slots: taken as yes)."""
        if self.runner.topology.cluster:
            return True
        holders = [self.keys.queue(q) + "holders" for q in queues]
        return bool(holders) and int(await self.runner.command("EXISTS", *holders)) > 0

    async def prune(self, limit: int) -> int:
        """Retention; nothing, without a round trip, just after a sweep that
        found nothing held: a worker's sweeper prunes after every sweep, and
        retention (a day by default) waits for the next whole one."""
        if not self._prune_next:
            self._prune_next = True
            return 0
        gone = await prune(self.runner, self.keys, await self.index.queues(), limit, self.relay)
        self.index.forget(gone)
        return len(gone)


async def sweep(
    runner: Runner, keys: Keys, liveness: Liveness, queues: list[str]
) -> tuple[RescueReport, list[QueueSweep], list[bytes], float]:
    """One sweep of ``queues`` (see the module docstring); what it found in each
    queue, the prefixes whose outboxes its recoveries left messages in, and
    Redis's clock as it read the registry."""
    queues = sorted(queues)
    calls = [Call.script("sweep", [keys.queue(q)], [BATCH, repr(PENDING_MAX)]) for q in queues]
    calls.append(Call.script("workers", [keys.fleet]))
    *replies, registry = await runner.pipeline(calls)
    sweeps = [_queue_sweep(q, r) for q, r in zip(queues, replies, strict=True)]
    # Not in the pipeline: scripts that meet NOSCRIPT (a restarted Redis) run
    # again after it, and a CLIENT LIST read before the registry would miss a
    # worker that connected and registered in between.
    gone, live = judge(registry, liveness.names(await liveness.everywhere()))
    now = float(registry[0])
    last_seen = {w.decode(): float(seen) for w, _, _, seen in registry[1:]}

    dead_holders = {s.queue: sorted(s.holders - live) for s in sweeps if s.holders - live}
    calls = [Call.script("deregister", [keys.fleet], [w]) for w in gone]
    calls += [Call.script("orphans", [keys.queue(q)], ws) for q, ws in dead_holders.items()]
    replies = await runner.pipeline(calls)
    buried = tuple(w for w, removed in zip(gone, replies, strict=False) if int(removed))
    by_queue = {s.queue: s for s in sweeps}
    for queue, jobs in zip(dead_holders, replies[len(gone) :], strict=True):
        by_queue[queue].orphaned = [_found(flat) for flat in jobs]

    rescued, relays = await _recover(runner, keys, sweeps, now, last_seen)
    promoted = sum(s.promoted for s in sweeps)
    report = RescueReport(swept=True, rescued=rescued, promoted=promoted, dead_workers=buried)
    return report, sweeps, relays, now


def _queue_sweep(queue: str, reply: Sequence[Any]) -> QueueSweep:
    promoted, holders, policy, expired, outbox, abandoned = reply
    return QueueSweep(
        queue=queue,
        promoted=int(promoted),
        holders={h.decode() for h in holders},
        policy=QueuePolicy.from_json(policy) if policy else QueuePolicy(),
        expired=[_found(flat) for flat in expired],
        outbox=int(outbox),
        abandoned=[a.decode() for a in abandoned],
    )


def _found(flat: Sequence[bytes]) -> Found:
    """A candidate from its hash (a flat HGETALL reply), with when its lease was
    last renewed: its expiry less the TTL it was renewed with (its claim, for an
    at-most-once job)."""
    f = codec.fields(flat)
    expires, ttl, started = f.get("lease_expires_at"), f.get("lease_ttl"), f.get("started_at")
    if expires is not None and ttl is not None:
        return codec.job(flat), float(expires) - float(ttl)
    return codec.job(flat), None if started is None else float(started)


async def _recover(
    runner: Runner, keys: Keys, sweeps: list[QueueSweep], now: float, last_seen: dict[str, float]
) -> tuple[tuple[Rescued, ...], list[bytes]]:
    calls, plans = [], []
    for s in sweeps:
        crashed = {j.id for j, _ in s.orphaned}
        candidates = [(j, p, Outcome.CRASHED) for j, p in s.orphaned]
        candidates += [(j, p, Outcome.STALLED) for j, p in s.expired if j.id not in crashed]
        if not candidates:
            continue
        args: list[Any] = [len(candidates)]
        plan = {}
        for job, renewed, outcome in candidates:
            proven = last_proof(outcome, renewed, last_seen.get(job.worker or ""))
            decision = decide_for(job, outcome, s.policy)
            rescued = plan[job.id] = Rescued.of(job, outcome, decision.state, proven, now)
            error = f"attempt {job.attempts} {outcome}: " + (
                f"its worker {job.worker} is gone" if outcome is Outcome.CRASHED
                else f"the lease of worker {job.worker} expired"
            )  # fmt: skip
            stall = rescued.stall_data()
            events = orjson.dumps(failure_events(outcome, decision, rescued=True, stall=stall))
            if_cancelled = orjson.dumps(
                failure_events(outcome, CANCELLED, rescued=True, stall=stall)
            )
            recovered_from = "" if decision.state is State.DEAD else codec.number(proven)
            args += [job.id, job.fence, job.worker or "", outcome.value, error,
                     decision.state.value, repr(decision.delay),
                     decision.dead_reason.value if decision.dead_reason else "",
                     "1" if decision.stall else "0", events, if_cancelled,
                     recovered_from]  # fmt: skip
        calls.append(Call.script("recover", [keys.queue(s.queue)], args))
        plans.append(plan)
    replies = await runner.pipeline(calls)
    recovered = tuple(plan[i.decode()] for plan, (done, _, _) in zip(plans, replies, strict=True)
                      for i in done)  # fmt: skip
    return recovered, [p for _, relays, _ in replies for p in relays]


def _keep(seconds: float | None) -> str:
    return "" if seconds is None else repr(float(seconds))


async def prune(
    runner: Runner, keys: Keys, queues: list[str], limit: int, relay: Relay
) -> list[str]:
    """Delete up to ``limit`` finished jobs of ``queues`` due for deletion; their ids."""
    defaults = [_keep(DEFAULTS.keep_completed), _keep(DEFAULTS.keep_dead)]
    shares = [(q, limit) for q in queues[:1]]
    if len(queues) > 1:
        counts = await runner.pipeline(
            [Call.script("prune", [keys.queue(q)], [0, *defaults]) for q in queues]
        )
        shares, left = [], limit
        for queue, ((due, _), _, _) in zip(queues, counts, strict=True):
            if left and int(due):
                shares.append((queue, min(int(due), left)))
                left -= shares[-1][1]
    # Where one script may reach the fleet's id index too, it drops the ids
    # itself: nothing is left behind if this process dies just after.
    index = [] if runner.topology.cluster else [keys.jobs]
    gone: list[str] = []
    for queue, share in shares:
        wanted = share
        while wanted > 0:
            n = min(wanted, SCRIPT_MAX)
            reply = await runner.call("prune", [keys.queue(queue), *index], [n, *defaults])
            _, ids = await relay.after(reply)
            gone += [i.decode() for i in ids]
            wanted = wanted - n if len(ids) == n else 0  # fewer: none due is left
    if runner.topology.cluster and gone:
        await runner.command("HDEL", keys.jobs, *gone)
    return gone
