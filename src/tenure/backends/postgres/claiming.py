"""Claiming on PostgreSQL: the worker's cycle, and the lease holder's writes.

The cycle (``complete_and_claim``) is one statement, one transaction (see
queries.sql): it completes the jobs handed in and claims new ones with ``FOR
UPDATE SKIP LOCKED``, on a connection held out of the pool between cycles. A
queue with a fleet-wide limit is claimed from under its row's lock, taken
first. Every other write of a lease holder (progress, complete, fail,
release) is one fence-checked statement: a stale fence raises LeaseLost.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import orjson
import psycopg

from tenure.backends.base import LeaseRef, Rescued
from tenure.backends.checks import claim_limit
from tenure.backends.postgres.database import IDLE_MS, UNREACHABLE, Database
from tenure.backends.postgres.flows import step_from_row
from tenure.backends.postgres.liveness import Liveness
from tenure.backends.postgres.pool import hung_up
from tenure.backends.postgres.statements import RELEASING, text_array
from tenure.backends.rows import JOB_COLUMNS
from tenure.config import QueuePolicy
from tenure.core.events import EventKind, failure_events
from tenure.core.payload import encode
from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import Outcome, State
from tenure.errors import JobNotFound, LeaseLost
from tenure.job import Job

FENCE = 1 + JOB_COLUMNS.index("fence")  # in a row of complete_and_claim
HELD_FOR_CYCLES = 3  # a worker has up to 3 cycles in flight
DEFAULTS = QueuePolicy()
# The writes that end an attempt and refuse a job whose cancel was requested.
ENDINGS = frozenset({"requeue", "bury", "release"})
PLAIN_KEPT = 100_000  # ids of plain jobs claimed and not yet ended, at most (see _plain)
PLANNED_FOR = 64  # the least limit a claim's statement is planned for (plan_bound)
Statement = tuple[bytes, dict[str, Any]]  # a query and its parameters


class Claiming:
    """Claims and the writes of lease holders, through ``db``; claims are made
    only under an identity ``liveness`` does not know to be lost."""

    def __init__(
        self, db: Database, liveness: Liveness, *, pool_size: int, max_payload: int
    ) -> None:
        self.db = db
        self.q = db.q
        self.liveness = liveness
        self.max_payload = max_payload
        self._limited: set[str] = set()  # queues whose last claim found a fleet-wide limit
        self._keyed: set[str] = set()  # of those, the ones with keys (QueuePolicy.keyed)
        # of those, the ones claimed under their keys' locks, not their rows' (gate: rowed)
        self._by_keys: set[str] = set()
        # Connections kept out of the pool for the cycle (see _cycle_fetch), at
        # most HELD_FOR_CYCLES, and one at least left in it for other calls.
        self._held: list[psycopg.AsyncConnection[Any]] = []
        self._hold_at_most = min(HELD_FOR_CYCLES, pool_size - 1)
        # The jobs claimed here that are no workflow's step, until they end: a
        # cycle that completes only such jobs leaves out the parts that release
        # steps (queries.sql, no_release). A job not known here (claimed by
        # another process, or forgotten at PLAIN_KEPT) completes as a step would.
        self._plain: set[str] = set()
        self._proven_made = -1  # the pool's connections made when the session last answered

    async def _claims_nothing(self, worker_id: str) -> bool:
        """Whether a claim now must take nothing: ``worker_id``'s liveness is
        known lost, or the pool made a connection since its session last
        answered and it does not answer now. A restarted server's goodbye may
        never reach the session (a partition dropped it): the session then looks
        alive until it sends, while the pool, reconnected, would claim on the
        new server under an identity whose lock is gone there, and the next
        sweep would recover the claims from under running handlers. Called
        with the claim's connection in hand: getting it may wait out a restart."""
        made = self.db.opened().made
        if made != self._proven_made:
            if not await self.liveness.answers(worker_id):
                return True
            self._proven_made = made
        return self.liveness.seems_lost(worker_id)

    def held_back(self, queues: Sequence[str]) -> bool:
        """Whether the last claim of one of ``queues`` found a fleet-wide limit."""
        return not self._limited.isdisjoint(queues)

    async def close(self) -> None:
        """Give the connections held for cycles back to the pool (before it closes)."""
        if self.db.pool is not None:
            while self._held:
                await self.db.pool.putconn(self._held.pop())

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, int, bytes]],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        """One statement, one transaction (queries.sql); a queue with a fleet-wide
        limit or keys is claimed from under its row's lock, taken first, or
        with per-key limits only, from under its keys' locks (lock_keys)."""
        limit = claim_limit(queues, limit)
        if not items and not limit:
            return set(), []
        queues = list(dict.fromkeys(queues)) if limit else []
        locked, keyed = self._locks(queues)
        ids = [i for i, _, _ in items]
        releasing = not self._plain.issuperset(ids)
        self._plain.difference_update(ids)
        # The arrays go as array literals (strings): psycopg's list dumper took
        # an eighth of a draining worker's main thread.
        params = {
            "ids": text_array(ids),
            "fences": "{" + ",".join([str(f) for _, f, _ in items]) + "}",
            "results": text_array(r.decode() for _, _, r in items),
            "queues": text_array(queues), "worker": worker_id, "locked": text_array(locked),
            "keyed": text_array(keyed),
            "delivery": DEFAULTS.delivery, "lease_ttl": DEFAULTS.lease_ttl,
            "channel": self.db.channel}  # fmt: skip
        skipping = bool(skip_tasks and limit)
        params["skip"] = text_array(skip_tasks) if skipping else None
        name = ("complete_and_claim_keys" if keyed and not locked else "complete_and_claim_keyed"
                if keyed else "complete_and_claim_limited" if locked
                else "complete_and_claim")  # fmt: skip
        name += ("_skipping" if skipping else "") + (RELEASING if releasing else "")
        params["want"] = limit
        # prepared, and planned for a bound above the limit
        bound = plan_bound(limit)
        query = self.q.limited(name, bound)
        first = self._first(locked, keyed, params, bound, skipping)
        rows = await self._cycle_fetch(first, query, params)
        jobs = [step_from_row(r[1:]) for r in rows if r[0]]
        if len(self._plain) > PLAIN_KEPT:  # lost leases' jobs never end here
            self._plain.clear()
        self._plain.update([j.id for j in jobs if j.workflow is None])
        done = {(r[1], r[FENCE]) for r in rows if r[0] is None}
        held_back = self._learn(queues, {r[1]: r[FENCE] for r in rows if r[0] == 0})
        if held_back and len(jobs) < limit:  # a limit this backend did not know of yet
            more = await self.complete_and_claim(
                (), worker_id, held_back, limit - len(jobs), skip_tasks=skip_tasks
            )
            jobs += more[1]
        return {(i, f) for i, f, _ in items} - done, jobs

    def _locks(self, queues: list[str]) -> tuple[list[str], list[str]]:
        """The queues whose rows the claim locks, and those whose keys it walks:
        the rows' of those with a fleet-wide limit or fair, keys among them, or
        when there are none, the keys of those with per-key limits only (else
        held back, they are claimed next: gate_limited)."""
        locked = [q for q in queues if q in self._limited and q not in self._by_keys]
        by_keys = [q for q in queues if q in self._by_keys]
        if by_keys and not locked:
            return [], by_keys
        return locked, [q for q in locked if q in self._keyed]

    def _learn(self, queues: list[str], limited: dict[str, int]) -> list[str]:
        """What the claim's gate said of each queue with a limit: 1 if it was
        held back for want of its lock, plus 2 if it has keys, plus 4 if its
        claims take its row's lock. Returns the queues held back."""
        self._limited = (self._limited - set(queues)) | set(limited)
        self._keyed = (self._keyed - set(queues)) | {q for q, v in limited.items() if v & 2}
        by_keys = {q for q, v in limited.items() if (v & 6) == 2}
        self._by_keys = (self._by_keys - set(queues)) | by_keys
        return [q for q, v in limited.items() if v & 1]

    def _first(
        self, locked: list[str], keyed: list[str], params: dict[str, Any], bound: int,
        skipping: bool,
    ) -> list[Statement]:  # fmt: skip
        """What a cycle runs before its statement, in its transaction: with a
        fleet-wide limit, the lock of the queues' rows (lock_queues), so that
        their claims go one at a time and each counts what the one before
        committed; with keys, the same and their due scheduled jobs queued
        (lock_keyed_queues), or with per-key limits only, the walk that locks
        the keys it picks from (lock_keys), planned for the cycle's ``bound``.
        The cycle's snapshot is taken once those locks are held."""
        lock = {"queues": params["locked"], "idle": IDLE_MS}
        if not keyed:
            return [(self.q["lock_queues"], lock)] if locked else []
        walks = not locked
        keyed_lock = {**lock, "keyed": params["keyed"], "walks": walks, "want": params["want"]}
        first = [(self.q.limited("lock_keyed_queues", bound), keyed_lock)]
        if walks:
            walk = self.q.limited("lock_keys" + ("_skipping" if skipping else ""), bound)
            first.append((walk, {**params, "namespace": self.db.namespace}))
        return first

    async def _cycle_fetch(
        self, first: list[Statement], query: bytes, params: dict[str, Any]
    ) -> list[Any]:
        """The rows of the cycle (``query``, after ``first``: _run), on a
        connection held out of the pool between cycles: taking one from the
        pool and giving it back cost more than the statement's own client
        side (and a cycle that took one while the other was held here waited
        for the only one left). A cycle that found nothing to do gives it
        back: an idle worker holds none out of its pool (which keeps one idle
        connection). A held connection the server hung up on, one that
        failed, or one whose call was cancelled goes back to the pool, which
        disposes of it."""
        pool = self.db.opened()
        conn = self._held.pop() if self._held else None
        if conn is not None and hung_up(conn):
            await pool.putconn(conn)
            conn = None
        try:
            if conn is None:
                conn = await pool.getconn()
            if params["queues"] != "{}" and await self._claims_nothing(params["worker"]):
                # Claimed under an identity storage no longer sees alive, a job
                # would be recovered from under us: claim nothing, the next
                # heartbeat registers us again. Checked with the connection in
                # hand: taking one from the pool may have waited out a restart.
                params = {**params, "queues": "{}"}
            rows = await self._run(conn, first, query, params)
        except BaseException as exc:
            if conn is not None:
                await pool.putconn(conn)
            if isinstance(exc, UNREACHABLE):
                raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc
            raise
        if rows and len(self._held) < self._hold_at_most:  # a dry cycle: idle
            self._held.append(conn)
        else:
            await pool.putconn(conn)
        return rows

    async def _run(
        self, conn: psycopg.AsyncConnection[Any], first: list[Statement], query: bytes,
        params: dict[str, Any],
    ) -> list[Any]:  # fmt: skip
        """The rows of ``query``; after ``first``, in one transaction sent with
        BEGIN and COMMIT in one pipeline: one round trip. (psycopg's
        transaction() in a pipeline syncs at its start and at its end: three
        more.) A statement that fails leaves the transaction aborted, and the
        connection, given back, is closed."""
        if not first:
            return await self._execute(conn, query, params)
        async with conn.pipeline():
            await conn.execute(b"BEGIN")
            for statement, args in first:
                await self._send(conn, statement, args)
            cur = await self._send(conn, query, params)
            await conn.execute(b"COMMIT")
        return await cur.fetchall()

    async def _execute(
        self, conn: psycopg.AsyncConnection[Any], query: bytes, params: dict[str, Any]
    ) -> list[Any]:
        """The rows of the cycle's statement (_send)."""
        return await (await self._send(conn, query, params)).fetchall()

    async def _send(
        self, conn: psycopg.AsyncConnection[Any], query: bytes, params: dict[str, Any]
    ) -> psycopg.AsyncRawCursor[Any]:
        """A statement of the cycle sent, prepared, with positional parameters
        (see Statements.positional)."""
        raw, names = self.q.positional(query)
        cur = psycopg.AsyncRawCursor(conn)
        await cur.execute(raw, [params[n] for n in names], prepare=True)
        return cur

    async def progress(self, job_id: str, fence: int, data: Any) -> None:
        payload = encode(data, what="progress", limit=self.max_payload).decode()
        await self._settle("progress", {"id": job_id, "fence": fence, "data": payload})

    async def complete(self, job_id: str, fence: int, result: Any = None) -> None:
        payload = encode(result, what="job result", limit=self.max_payload).decode()
        await self._settle("complete", {"id": job_id, "fence": fence, "result": payload})

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        name, params = failure(job_id, fence, outcome, error, decision)
        await self._settle(name, params)

    async def release(self, job_id: str, fence: int) -> None:
        events = orjson.dumps([[EventKind.RELEASED, None]]).decode()
        await self._settle("release", {"id": job_id, "fence": fence, "events": events})

    async def _settle(self, name: str, params: dict[str, Any]) -> None:
        """One fence-checked write; LeaseLost (or JobNotFound) when it touched nothing.
        A job queued again wakes the idle workers of its queue (and a step
        released, those of its own: the statement does)."""
        params["channel"] = self.db.channel
        if name != "progress":
            self._plain.discard(params["id"])
        async with self.db.conn() as conn:
            cur = await conn.execute(self.q[name], params)
            row = await cur.fetchone()
            if row is None and name in ENDINGS:  # refused: was its job cancelled meanwhile?
                cur = await conn.execute(self.q["end_cancelled"], _cancelling(params))
                row = await cur.fetchone()
            if row is None:
                cur = await conn.execute(self.q["job_exists"], params)
                if await cur.fetchone() is None:
                    raise JobNotFound(f"no job with id {params['id']!r}")
                raise LeaseLost(
                    f"job {params['id']} is no longer held with fence {params['fence']}: "
                    "it was recovered or settled by someone else"
                )
            if name == "release" or params.get("state") == State.QUEUED:  # queued again
                await self.db.notify(conn, [row[0]])


def plan_bound(limit: int) -> int:
    """The limit a claim's statement is planned for, at or above ``limit``: a
    connection plans the statement once for each limit it is sent with, and
    planning the cycle's statement costs more than running it (a draining
    worker's claims ask for most limits up to its slots and claims ahead: 48
    in a drain of 20,000 jobs). The claim takes ``limit`` jobs at most
    (%(want)s, queries.sql). The least power of 2 at or above ``limit``, and
    at least PLANNED_FOR, whose plan is that of any smaller limit."""
    power = 1 << (limit - 1).bit_length() if limit > 1 else 1
    return max(power, PLANNED_FOR)


def failure(
    job_id: str,
    fence: int,
    outcome: Outcome,
    error: str | None,
    decision: Decision,
    *,
    rescued: Rescued | None = None,
) -> tuple[str, dict[str, Any]]:
    """The fence-checked write that applies a retry decision, and its events
    (a recovery's, ``rescued``, with what the sweeper found)."""
    stall = None if rescued is None else rescued.stall_data()
    events = failure_events(outcome, decision, rescued=rescued is not None, stall=stall)
    params = {"id": job_id, "fence": fence, "outcome": outcome.value, "error": error,
              "stall": int(decision.stall), "events": orjson.dumps(events).decode()}  # fmt: skip
    if decision.state is State.CANCELLED:
        return "end_cancelled", params
    if decision.state is State.DEAD:
        return "bury", {**params, "dead_reason": decision.dead_reason}
    recovered_from = None if rescued is None else rescued.proven_at
    return "requeue", {**params, "state": decision.state.value, "delay": decision.delay,
                       "recovered_from": recovered_from}  # fmt: skip


def _cancelling(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of end_cancelled for those of a refused ending (ENDINGS)."""
    outcome = Outcome(params.get("outcome", Outcome.RELEASED))
    events = orjson.dumps(failure_events(outcome, CANCELLED, rescued=False)).decode()
    return {**params, "outcome": outcome.value, "error": params.get("error"), "events": events}
