"""A lease holder's writes on SQLite: the worker's cycle (complete what
finished and claim what is due, in one transaction, on the loop's own
connection when the write lock is free), and an attempt's progress and other
ends (failed, released), each fence-checked. Its methods but the cycle run on
the backend's thread, their inputs checked."""

from __future__ import annotations

import asyncio
import functools
import itertools
import sqlite3
from collections.abc import Collection, Sequence
from typing import Any, NoReturn

import orjson

from tenure.backends.base import LeaseRef
from tenure.backends.checks import claim_limit
from tenure.backends.sqlite import keys, workflows
from tenure.backends.sqlite.database import Busy, Database
from tenure.backends.sqlite.events import Pending, record_job
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core import limits
from tenure.core.clock import Clock
from tenure.core.events import EventKind, failure_events
from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import Outcome, State
from tenure.errors import JobNotFound, LeaseLost
from tenure.job import Job

# How long the worker's cycle pauses, letting the loop run, before it tries the
# write lock again on the loop's thread; then it waits for it on the backend's
# thread (SQLite's own busy handler sleeps 1 ms, then longer, per attempt).
FAST_PATH_PAUSES = (0.0, 0.0002, 0.0005, 0.001)
SEQ = keys.N + 1  # where take_leases returns a job's seq, after its columns and key


@functools.lru_cache(maxsize=64)
def _for_queues(name: str, n: int) -> str:
    """Statement ``name`` for ``n`` queues: its ``{queues}`` as ``n`` placeholders."""
    return Q[name].replace("{queues}", ", ".join("?" * n))


@functools.lru_cache(maxsize=64)
def _claimable(n: int, skipping: bool) -> str:
    """The claim's statement for ``n`` queues (see claimable in queries.sql),
    passing over some tasks' jobs if ``skipping``."""
    each = Q["claimable_in_queue_skipping" if skipping else "claimable_in_queue"]
    return Q["claimable"].replace("{each}", " UNION ALL ".join([each] * n))


# A queue's policy, parsed once per stored text: a claim reads the policies of
# the queues it takes from, and parsing them cost more than reading them.
_policy_of = functools.lru_cache(maxsize=256)(QueuePolicy.from_json)


def read_policies(
    conn: sqlite3.Connection | sqlite3.Cursor, queues: Collection[str]
) -> dict[str, QueuePolicy]:
    """The policies of ``queues``, the defaults for a queue that has none stored."""
    queues = tuple(dict.fromkeys(queues))
    found = dict(conn.execute(_for_queues("policies", len(queues)), queues).fetchall())
    return {q: _policy_of(found.get(q)) for q in queues}


class Claiming:
    """The cycle and the lease holder's other writes; what the claims found of
    their queues, which completions use."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._events_off: set[str] = set()  # queues whose last claim found events off
        # Queues whose last claim found a max_active (or max_active_per_key): a
        # completion there may let an idle worker claim, so it rings the doorbells.
        self._limited: set[str] = set()

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        limit = claim_limit(queues, limit)
        if not items and not limit:
            return set(), []
        cycle = self._cycle
        if skip_tasks:
            cycle = functools.partial(cycle, skip=(orjson.dumps(list(skip_tasks)).decode(),))
        args = (items, worker_id, list(queues), limit)
        db = self.db
        for pause in FAST_PATH_PAUSES if db.fast is not None else ():
            try:
                return cycle(db.fast, *args)
            except Busy:  # another process writes: its transaction is likely short
                await asyncio.sleep(pause)
            except sqlite3.Error as exc:
                raise db.failed(exc) from exc
        return await db.run(cycle, None, *args)  # wait for the lock

    def _cycle(
        self,
        conn: sqlite3.Connection | None,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: list[str],
        limit: int,
        *,
        skip: tuple[str, ...] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        now = self.clock.now()
        pending = Pending()  # the completions' events, then the claims': a row per queue
        with self.db.tx(conn) as tx:  # one transaction: one lock, one commit
            lost = self.completing(tx, now, items, pending) if items else set()
            jobs = self._claiming(tx, worker_id, queues, limit, skip, now=now, pending=pending)
            pending.record(tx, now)
        return lost, jobs

    def completing(
        self,
        conn: sqlite3.Connection,
        now: float,
        items: Sequence[tuple[str, int, bytes]],
        pending: Pending,
    ) -> set[LeaseRef]:
        """Complete the leases still held (returns those that are not); their
        events are added to ``pending``."""
        # [[id, fence, result], ...]: each result is JSON already
        listed = b"[" + b",".join(
            [b"[%b,%d,%b]" % (orjson.dumps(i), f, payload) for i, f, payload in items]
        ) + b"]"  # fmt: skip
        conn.execute(Q["end_attempts"], (now, Outcome.COMPLETED, None, listed))
        done = conn.execute(Q["complete_each"], (now, listed)).fetchall()
        # A queue whose claims found its events off records none (its policy is
        # read by every claim): completing costs nothing more there.
        off = self._events_off
        pending.events += [(q, EventKind.COMPLETED, i, wf and {"workflow": wf})
                           for i, _, q, wf in done if q not in off]  # fmt: skip
        steps = [i for i, _, _, wf in done if wf is not None]
        if steps:  # a workflow's: its dependents move in this transaction
            workflows.settle(conn, now, pending, completed=steps)
        if pending.queued or (self._limited and any(q in self._limited for _, _, q, _ in done)):
            self.db.ring(conn)
        return {(i, f) for i, f, _ in items} - {(i, f) for i, f, _, _ in done}

    def _claiming(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        queues: list[str],
        limit: int,
        skip: tuple[str, ...],
        *,
        now: float,
        pending: Pending,
    ) -> list[Job]:
        """Claim up to ``limit`` jobs, passing over the tasks ``skip`` lists (a
        JSON array, if any); their events are added to ``pending``."""
        if limit <= 0:
            return []
        conn.execute(Q["promote_due"], (now,))
        params = [x for q in queues for x in (q, *skip, limit)]
        rows = conn.execute(_claimable(len(queues), bool(skip)), (*params, limit)).fetchall()
        if not rows:
            return []
        policies = read_policies(conn, queues)
        if self._limited:
            self._limited -= {q for q, p in policies.items() if not _counts_active(p)}
        gates: list[keys.Gate] = []
        if any(p.paused or p.limited for p in policies.values()):
            rows, gates = self._within_limits(conn, policies, limit, skip, now)
            if not rows:
                return []
        leases = []
        for seq, queue in rows:
            policy = policies[queue]
            leases.append((seq, policy.lease_ttl if policy.delivery == "at-least-once" else None))
        taken = conn.execute(Q["take_leases"], (worker_id, now, orjson.dumps(leases))).fetchall()
        rank = {seq: i for i, (seq, _) in enumerate(rows)}  # back in claim order
        taken.sort(key=lambda row: rank[row[SEQ]])
        jobs = [keys.job_of_row(row) for row in taken]
        steps = {
            j.id: (j, row[-1]) for j, row in zip(jobs, taken, strict=True) if row[-1] is not None
        }
        if steps:  # a workflow's: with its upstream, for get_many
            workflows.in_flows(conn, steps)
        _took_from_buckets(conn, policies, jobs, now)
        for gate in gates:
            ranked = {p[0]: p for p in gate.picks}
            gate.took([ranked[row[SEQ]] for row in taken if row[SEQ] in ranked])
        off = {q for q, p in policies.items() if not p.events}
        self._events_off = (self._events_off - policies.keys()) | off
        if len(off) < len(policies):
            pending.on |= policies.keys() - off
            kind = EventKind.STARTED
            pending.events += [
                (j.queue, kind, j.id, {"attempt": j.attempts, "worker": worker_id}) for j in jobs
            ]
        return jobs

    def _within_limits(
        self,
        conn: sqlite3.Connection,
        policies: dict[str, QueuePolicy],
        limit: int,
        skip: tuple[str, ...],
        now: float,
    ) -> tuple[list[tuple[int, str]], list[keys.Gate]]:
        """The claim again, within each queue's share (``_shares``): the rows
        (seq, queue) to take, and the gates of the keyed queues among them."""
        shares = self._shares(conn, policies, limit, now)
        plain = {q: n for q, n in shares.items() if not policies[q].keyed}
        rows = []
        if plain:
            params = [x for q, n in plain.items() for x in (q, *skip, n)]
            rows = conn.execute(_claimable(len(plain), bool(skip)), (*params, limit)).fetchall()
        if len(plain) == len(shares):
            return rows, []
        # keyed queues: key by key (keys.py)
        gates = [
            keys.Gate(conn, q, policies[q], n, now) for q, n in shares.items() if q not in plain
        ]
        return _merged(rows, gates, skip[0] if skip else keys.NO_SKIP, limit), gates

    def _shares(
        self, conn: sqlite3.Connection, policies: dict[str, QueuePolicy], limit: int, now: float
    ) -> dict[str, int]:
        """How many jobs the claim may take from each queue: ``limit``, less where
        a fleet-wide limit or a pause holds (tenure.core.limits), counted under
        the write lock. A queue held back entirely is left out."""
        shares = {}
        for queue, policy in policies.items():
            share = limit
            if policy.limited or policy.paused:
                active = 0
                if policy.max_active is not None:
                    (active,) = conn.execute(Q["active_in_queue"], (queue,)).fetchone()
                tokens = None
                if policy.rate_limit is not None:
                    tokens = _bucket(conn, policy, queue, now)
                share = limits.allowance(policy, limit, active, tokens)
            if share > 0:
                shares[queue] = share
            if _counts_active(policy):
                self._limited.add(queue)
        return shares

    def progress(self, job_id: str, fence: int, payload: bytes) -> None:
        events = [(EventKind.PROGRESS, {"progress": orjson.Fragment(payload)})]
        self._settle(Q["set_progress"], (payload, job_id, fence), (job_id, fence), None, events)

    def complete(self, job_id: str, fence: int, payload: bytes) -> None:
        now, pending = self.clock.now(), Pending()
        with self.db.tx() as conn:
            if self.completing(conn, now, [(job_id, fence, payload)], pending):
                refused(conn, job_id, fence)
            pending.record(conn, now)

    def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        now = self.clock.now()
        sql, params = failure(job_id, fence, error, decision, now)
        events = failure_events(outcome, decision, rescued=False)
        self._settle(sql, params, (job_id, fence), (outcome, error, now), events)

    def release(self, job_id: str, fence: int, now: float) -> None:
        ending = (Outcome.RELEASED, None, now)
        events = [(EventKind.RELEASED, None)]
        self._settle(Q["release"], (job_id, fence), (job_id, fence), ending, events)

    def _settle(
        self,
        sql: str,
        params: tuple[Any, ...],
        lease: LeaseRef,
        ending: tuple[Outcome, str | None, float] | None,
        events: Sequence[tuple[str, dict[str, Any] | None]],
    ) -> None:
        """Run one fence-checked write, then record its ``events``; end the
        attempt in history when ``ending`` is given."""
        job_id, fence = lease
        with self.db.tx() as conn:
            if ending is not None:  # first: it reads the attempt from the job
                outcome, error, now = ending
                conn.execute(Q["end_attempts"], (now, outcome, error, listed(job_id, fence)))
            cur = conn.execute(sql, params)
            ended = cur.fetchall()  # [(workflow,)] when it ended the job (bury, end_cancelled)
            if cur.rowcount == 0:
                if ending is not None:
                    ended = conn.execute(Q["end_cancelled"], (error, now, job_id, fence)).fetchall()
                if not ended:
                    refused(conn, job_id, fence)
                events = failure_events(outcome, CANCELLED, rescued=False)
            now = self.clock.now() if ending is None else ending[2]
            workflow = ended[0][0] if ended else None
            if workflow is not None:
                events = [(k, d and {**d, "workflow": workflow}) for k, d in events]
            record_job(conn, now, job_id, events)
            if workflow is not None:  # a workflow's step ended: what waits on it moves
                end_steps(self.db, conn, now, [job_id])
            if sql is Q["release"] or sql is Q["requeue"]:  # queued again: wake the idle
                self.db.ring(conn)


def _counts_active(policy: QueuePolicy) -> bool:
    """Whether a completion in a queue with ``policy`` may let a claim take more."""
    return policy.max_active is not None or policy.max_active_per_key is not None


def _merged(
    rows: list[tuple[int, str]], gates: list[keys.Gate], skip: str, limit: int
) -> list[tuple[int, str]]:
    """The plain queues' ``rows`` (seq, queue) and what each keyed queue's
    ``gates`` pick, in turns, up to ``limit``."""
    each = [rows] + [[(p[0], g.queue) for p in keys.pick(g, skip)] for g in gates]
    turns = (r[i] for i in range(limit) for r in each if i < len(r))
    return list(itertools.islice(turns, limit))


def _took_from_buckets(
    conn: sqlite3.Connection, policies: dict[str, QueuePolicy], jobs: list[Job], now: float
) -> None:
    """Each started job takes a token from its queue's rate bucket."""
    for queue, policy in policies.items():
        if policy.rate_limit is None:
            continue
        started = sum(1 for j in jobs if j.queue == queue)
        if started:
            tokens = _bucket(conn, policy, queue, now) - started
            conn.execute(Q["take_from_bucket"], (tokens, now, queue))


def _bucket(conn: sqlite3.Connection, policy: QueuePolicy, queue: str, now: float) -> float:
    """The tokens in the queue's rate bucket now."""
    tokens, at = conn.execute(Q["rate_bucket"], (queue,)).fetchone() or (None, None)
    return limits.refilled(policy, tokens, at, now)


def refused(conn: sqlite3.Connection, job_id: str, fence: int) -> NoReturn:
    """Why a fence-checked write touched nothing: JobNotFound or LeaseLost."""
    if conn.execute(Q["job_exists"], (job_id,)).fetchone() is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    raise LeaseLost(
        f"job {job_id} is no longer held with fence {fence}: "
        "it was recovered or settled by someone else"
    )


def end_steps(db: Database, conn: sqlite3.Connection, now: float, job_ids: list[str]) -> None:
    """Workflows' steps ended dead or cancelled: what waits on them moves, in
    this transaction, after their own events."""
    pending = Pending()
    workflows.settle(conn, now, pending, ended=job_ids)
    pending.record(conn, now)
    if pending.queued:
        db.ring(conn)


def listed(job_id: str, fence: int) -> bytes:
    """One lease as the statements of many take it (end_attempts)."""
    return orjson.dumps([[job_id, fence]])


def failure(
    job_id: str,
    fence: int,
    error: str | None,
    decision: Decision,
    now: float,
    *,
    recovered_from: float | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The fence-checked write that applies a retry decision (a recovery's
    records when the lost attempt was last proven alive)."""
    stall = int(decision.stall)
    if decision.state is State.CANCELLED:
        return Q["end_cancelled"], (error, now, job_id, fence)
    if decision.state is State.DEAD:
        return Q["bury"], (decision.dead_reason, error, stall, now, job_id, fence)
    run_at = now + decision.delay if decision.state is State.SCHEDULED else None
    return Q["requeue"], (decision.state, run_at, error, stall, recovered_from, job_id, fence)
