"""The sweeper's work on PostgreSQL: rescue, and retention (prune, events' trim).

A sweep runs in one transaction, guarded fleet-wide by
``pg_try_advisory_xact_lock`` (``sweep_guard``; a refused sweeper tries again
at a random time spread over the fleet: ``_spread``): it recovers the attempts of
workers gone (their advisory lock dropped) and of leases expired, each by the
same fence-checked write a worker's failure makes, promotes due scheduled
jobs, wakes their queues, and trims events once per ``TRIM_INTERVAL``.

A sweep that finds the fleet idle (``idle``: no job active, queued or due
within IDLE_AHEAD) is the last for IDLE_AHEAD, unless the liveness session
hears a NOTIFY or stops listening meanwhile: a job can only become active
after an enqueue, requeue or promotion, which notifies at its commit, or by
coming due. Until then ``rescue`` answers without a round trip (``swept``
False), and the sweeper prunes nothing: an idle worker alone would otherwise
sweep and prune every interval, the most of its transactions.
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection
from typing import Any

import psycopg

from tenure.backends.base import Rescued, RescueReport
from tenure.backends.checks import check_prune_limit, last_proof
from tenure.backends.postgres.claiming import failure
from tenure.backends.postgres.database import IDLE_MS, Database
from tenure.backends.postgres.wakeup import Wakeups
from tenure.backends.rows import job_from_row
from tenure.config import QueuePolicy
from tenure.core import retention
from tenure.core.retry import decide_for
from tenure.core.states import Outcome
from tenure.job import Job

TRIM_INTERVAL = 60.0  # seconds between two retention passes of one sweeper
# A sweeper refused waits past the guard's window for a random share of the
# fleet's intervals: the fleet tries about SPREAD times per interval, however
# many workers it has, and the first try after the window sweeps.
SPREAD = 4
# Seconds the fleet's idleness holds, after a sweep found it, without a NOTIFY
# heard: a bound for what none tells (a scheduled job comes due, a worker's
# row left by its death, retention's clock).
IDLE_AHEAD = 10.0
DEFAULTS = QueuePolicy()

Connection = psycopg.AsyncConnection[Any]
Found = list[tuple[Job, float | None]]  # jobs whose lease the sweep found, and its renewal


def _spread(interval: float, workers: int) -> float:
    """A refused sweeper's wait past the guard's window (see SPREAD): each
    refused try is a transaction, and an idle fleet makes mostly those."""
    return random.random() * interval * max(workers - 1, 0) / SPREAD


class Rescue:
    """Sweeps and retention, through ``db``."""

    def __init__(self, db: Database, wakeups: Wakeups) -> None:
        self.db = db
        self.q = db.q
        self.wakeups = wakeups
        self._last_trim = -TRIM_INTERVAL  # when this sweeper last applied events' retention
        # Since a sweep found the fleet idle: until when, and what was heard before it.
        self._idle: tuple[float, int] | None = None

    async def rescue(self, min_interval: float = 0.0) -> RescueReport:
        if min_interval and self._still_idle():
            return RescueReport(swept=False, retry_in=min_interval)
        lock = (self.db.namespace << 32) | 1
        heard, began = self.wakeups.heard(), time.monotonic()
        self._idle = None
        async with self.db.tx() as conn:
            cur = await conn.execute(
                self.q["sweep_guard"], {"lock": lock, "interval": min_interval, "idle": IDLE_MS}
            )
            row = await cur.fetchone()
            assert row is not None
            swept, retry_in, now, workers = row
            if not swept:
                return RescueReport(swept=False, retry_in=retry_in + _spread(min_interval, workers))
            cur = await conn.execute(self.q["dead_workers"], {"namespace": self.db.namespace})
            last_seen: dict[str, float] = dict(await cur.fetchall())
            rescued: list[Rescued] = []
            for outcome, query in ((Outcome.CRASHED, "orphaned_leases"),
                                   (Outcome.STALLED, "expired_leases")):  # fmt: skip
                cur = await conn.execute(self.q[query])
                found = [(job_from_row(r[:-1]), r[-1]) for r in await cur.fetchall()]
                if outcome is Outcome.CRASHED and found:
                    found = await self._still_orphaned(conn, found)
                policies = await self._policies(conn, {j.queue for j, _ in found})
                for job, renewed in found:
                    proven = last_proof(outcome, renewed, last_seen.get(job.worker or ""))
                    policy = policies[job.queue]
                    rescued.append(
                        await self._recover(conn, job, outcome, policy, proven=proven, now=now)
                    )
            cur = await conn.execute(self.q["promote_due"])
            promoted = [q for (q,) in await cur.fetchall()]
            await self.db.notify(conn, {*promoted, *(r.queue for r in rescued)})
            await self._trim_events(conn)
            if heard is not None and not rescued and not promoted:
                cur = await conn.execute(self.q["idle"], {"ahead": IDLE_AHEAD})
                if (row := await cur.fetchone()) and row[0]:
                    self._idle = (began + IDLE_AHEAD, heard)
        return RescueReport(True, tuple(rescued), len(promoted), tuple(last_seen))

    def _still_idle(self) -> bool:
        """Whether the fleet is still as idle as the last sweep found it (no
        round trip): within IDLE_AHEAD of it, and nothing heard since it
        began (a job committed after its snapshot notified after it)."""
        if self._idle is None:
            return False
        until, heard = self._idle
        if time.monotonic() < until and self.wakeups.heard() == heard:
            return True
        self._idle = None
        return False

    async def _still_orphaned(self, conn: Connection, found: Found) -> Found:
        """The orphaned leases whose holder is still unregistered (see still_orphaned)."""
        cur = await conn.execute(self.q["still_orphaned"], {"ids": [j.id for j, _ in found]})
        still = {i for (i,) in await cur.fetchall()}
        return [(job, renewed) for job, renewed in found if job.id in still]

    async def _recover(
        self,
        conn: Connection,
        job: Job,
        outcome: Outcome,
        policy: QueuePolicy,
        *,
        proven: float | None,
        now: float,
    ) -> Rescued:
        decision = decide_for(job, outcome, policy)
        rescued = Rescued.of(job, outcome, decision.state, proven, now)
        error = f"attempt {job.attempts} {outcome}: " + (
            f"its worker {job.worker} is gone" if outcome is Outcome.CRASHED
            else f"the lease of worker {job.worker} expired"
        )  # fmt: skip
        name, params = failure(job.id, job.fence, outcome, error, decision, rescued=rescued)
        await conn.execute(self.q[name], {**params, "channel": self.db.channel})
        return rescued

    async def _policies(self, conn: Connection, queues: Collection[str]) -> dict[str, QueuePolicy]:
        if not queues:
            return {}
        cur = await conn.execute(self.q["policies"], {"queues": list(queues)})
        found = dict(await cur.fetchall())
        return {q: QueuePolicy.from_json(found.get(q)) for q in queues}

    async def _trim_events(self, conn: Connection) -> None:
        """Retention, once per TRIM_INTERVAL of this sweeper: a pass reads every event."""
        now = time.monotonic()
        if now - self._last_trim < TRIM_INTERVAL:
            return
        self._last_trim = now
        params = {"max_age": DEFAULTS.events_max_age, "max_count": DEFAULTS.events_max_count}
        await conn.execute(self.q["trim_events"], params)

    async def prune(self, limit: int) -> int:
        """One transaction (the server counts one, not two: the policies are
        read in it) of at most ``limit`` jobs."""
        check_prune_limit(limit)
        async with self.db.tx() as conn:
            cur = await conn.execute(self.q["all_policies"])
            policies = {q: QueuePolicy.from_json(p) for q, p in await cur.fetchall()}
            rules = retention.rules(policies)
            if not rules:
                return 0
            queues, states, keeps = zip(*rules, strict=True)
            params = {"queues": list(queues), "states": [str(s) for s in states],
                      "keeps": list(keeps)}  # fmt: skip
            cur = await conn.execute(self.q.limited("prune", limit), params, prepare=False)
            [(pruned,)] = await cur.fetchall()
        return int(pruned)
