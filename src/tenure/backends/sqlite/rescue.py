"""The sweeper's work on SQLite: rescue (attempts whose worker is gone, its
lock free, or whose lease expired go where the retry policy says; due
scheduled jobs are queued), and retention (the pruner's deletion of finished
jobs; events' is the sweep's, events.py)."""

from __future__ import annotations

import sqlite3
import time

from tenure.backends.base import Rescued, RescueReport
from tenure.backends.checks import last_proof
from tenure.backends.sqlite.claiming import end_steps, failure, listed, read_policies
from tenure.backends.sqlite.database import SETTLE, Database
from tenure.backends.sqlite.events import EventReader, record_job
from tenure.backends.sqlite.keys import job_of_row
from tenure.backends.sqlite.liveness import Workers
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core import retention
from tenure.core.clock import Clock
from tenure.core.events import failure_events
from tenure.core.retry import decide_for
from tenure.core.states import Outcome
from tenure.job import Job

PRUNE_TX = 250  # jobs per transaction of a prune: a few ms (docs/benchmarks.md)


class Rescue:
    """One sweep (dead workers buried, lost attempts recovered, due jobs queued,
    events trimmed), and the pruner's pass. Its methods run on the backend's
    thread."""

    def __init__(self, db: Database, clock: Clock, workers: Workers, events: EventReader) -> None:
        self.db = db
        self.clock = clock
        self.workers = workers
        self.events = events

    def rescue(self, min_interval: float) -> RescueReport:
        self.db.file.check()
        # Just after the write lock was held long (by a process frozen holding it,
        # or a long transaction), every worker's renewal waited for it and some
        # still sleep in SQLite's busy handler: judge no lease expired until they
        # have landed. Dead workers (their flock free) are recovered regardless.
        judge_leases = time.monotonic() - self.db.blocked_at > SETTLE
        # Leases are judged by the time the sweep began: one that waited for
        # the write lock (a worker frozen holding it) waited with every
        # renewal. What it records is stamped by the time it acts.
        judged = self.clock.now()
        with self.db.tx() as conn:
            now = self.clock.now()
            (last,) = conn.execute(Q["sweep_guard"]).fetchone()
            if 0 <= now - last < min_interval:  # a clock that went back does not stop sweeps
                return RescueReport(swept=False, retry_in=min_interval - (now - last))
            conn.execute(Q["sweep_mark"], (now,))
            last_seen = self.workers.bury_dead(conn)
            rescued = []
            for outcome, query in ((Outcome.CRASHED, "orphaned_leases"),
                                   (Outcome.STALLED, "expired_leases")):  # fmt: skip
                if outcome is Outcome.STALLED and not judge_leases:
                    continue
                params = () if outcome is Outcome.CRASHED else (judged,)
                rows = conn.execute(Q[query], params).fetchall()
                found = [(job_of_row(r), r[-1]) for r in rows]
                policies = read_policies(conn, {j.queue for j, _ in found}) if found else {}
                for job, renewed in found:
                    proven = last_proof(outcome, renewed, last_seen.get(job.worker or ""))
                    policy = policies[job.queue]
                    rescued.append(
                        _recover(self.db, conn, job, outcome, policy, now=now, proven=proven)
                    )
            promoted = conn.execute(Q["promote_due"], (now,)).rowcount
            conn.execute(Q["trim_key_buckets"], (now,))
            if promoted or rescued:
                self.db.ring(conn)
            self.events.trim(conn, now)
        return RescueReport(
            swept=True, rescued=tuple(rescued), promoted=promoted, dead_workers=tuple(last_seen)
        )

    def prune(self, limit: int) -> int:
        """Delete up to ``limit`` finished jobs due for deletion; how many. In
        transactions of at most PRUNE_TX jobs: each holds the database's one
        write lock, which the workers' cycles wait for."""
        pruned = 0
        while pruned < limit:
            want = min(PRUNE_TX, limit - pruned)
            left = want
            now = self.clock.now()
            with self.db.tx() as conn:
                found = conn.execute(Q["all_policies"])
                policies = {q: QueuePolicy.from_json(p) for q, p in found}
                for queue, state, keep in retention.rules(policies):
                    left -= conn.execute(Q["prune"], (queue, state, now - keep, left, now)).rowcount
                    if left == 0:
                        break
            pruned += want - left
            if left:
                break
        return pruned


def _recover(
    db: Database,
    conn: sqlite3.Connection,
    job: Job,
    outcome: Outcome,
    policy: QueuePolicy,
    *,
    now: float,
    proven: float | None,
) -> Rescued:
    """Apply the retry policy's decision to an attempt lost for ``outcome``."""
    decision = decide_for(job, outcome, policy)
    error = f"attempt {job.attempts} {outcome}: " + (
        f"its worker {job.worker} is gone" if outcome is Outcome.CRASHED
        else f"the lease of worker {job.worker} expired"
    )  # fmt: skip
    sql, params = failure(job.id, job.fence, error, decision, now, recovered_from=proven)
    conn.execute(Q["end_attempts"], (now, outcome, error, listed(job.id, job.fence)))
    ended = conn.execute(sql, params).fetchall()  # [(workflow,)] when it ended the job
    rescued = Rescued.of(job, outcome, decision.state, proven, now)
    events = failure_events(outcome, decision, rescued=True, stall=rescued.stall_data())
    workflow = ended[0][0] if ended else None
    if workflow is not None:
        events = [(k, {**d, "workflow": workflow}) for k, d in events]
    record_job(conn, now, job.id, events)
    if workflow is not None:  # a workflow's step ended: what waits on it moves
        end_steps(db, conn, now, [job.id])
    return rescued
