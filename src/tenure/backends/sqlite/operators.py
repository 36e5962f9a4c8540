"""The SQLite backend's operator verbs: reading, cancelling, the DLQ, policies
and workers. A mixin of :class:`~tenure.backends.sqlite.SQLiteBackend`."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from tenure.backends.base import Page, WorkerInfo
from tenure.backends.checks import (
    check_cursor,
    check_listing,
    check_match,
    check_prune_limit,
    check_retried_by,
    cursor_seq,
    not_cancellable,
    prefix_range,
    queue_busy,
)
from tenure.backends.rows import attempt_from_row, job_from_row
from tenure.backends.sqlite.doorbells import Doorbells
from tenure.backends.sqlite.events import record, record_job
from tenure.backends.sqlite.liveness import WorkerLocks
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core import retention
from tenure.core.clock import Clock
from tenure.core.events import EventKind, RetriedBy
from tenure.core.names import check_job_id, check_job_ids, check_name
from tenure.core.states import DeadReason, State
from tenure.errors import JobNotFound
from tenure.job import Job

T = TypeVar("T")
PRUNE_TX = 250  # jobs per transaction of a prune: a few ms (docs/benchmarks.md)


class Operators:
    """The SQLite backend's operator verbs: reading, cancelling, the DLQ, policies, workers."""

    clock: Clock
    _locks: WorkerLocks
    doorbells: Doorbells

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[..., T], *args: Any) -> T: ...

        @property
        def conn(self) -> sqlite3.Connection: ...

        def _tx(self) -> AbstractContextManager[sqlite3.Connection]: ...

        def _ring(self, conn: sqlite3.Connection) -> None: ...

    # -- operators ---------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        return await self._run(self._cancel, check_job_id(job_id))

    def _cancel(self, job_id: str) -> Job:
        now = self.clock.now()
        with self._tx() as conn:
            if conn.execute(Q["cancel"], (now, job_id)).rowcount > 0:
                record_job(conn, now, job_id, [(EventKind.CANCELLED, None)])
            elif conn.execute(Q["request_cancel"], (job_id,)).rowcount == 0:
                raise not_cancellable(self._get(conn, job_id))
            return self._get(conn, job_id)

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        data = {"by": check_retried_by(by).value}
        return await self._run(self._bulk, "retry_dead", queue, ids, (self.clock.now(),), data)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        return await self._run(self._bulk, "purge_dead", queue, check_job_ids(job_ids), ())

    def _bulk(
        self,
        verb: str,
        queue: str,
        job_ids: Sequence[str] | None,
        head: tuple[Any, ...],
        data: dict[str, Any] | None = None,
    ) -> int:
        """Retry or purge; each moved row gives (id, attempts)."""
        kind = EventKind.RETRIED if verb == "retry_dead" else EventKind.PURGED
        with self._tx() as conn:
            if job_ids is None:
                moved = conn.execute(Q[f"{verb}_all"], (*head, queue)).fetchall()
            else:
                one = Q[f"{verb}_one"]
                moved = [r for j in job_ids for r in conn.execute(one, (*head, queue, j))]
            if moved and verb == "retry_dead":
                self._ring(conn)
            events = [(queue, kind, i, data and {**data, "attempts": n}) for i, n in moved]
            record(conn, self.clock.now(), events)
            return len(moved)

    async def prune(self, limit: int) -> int:
        return await self._run(self._prune, check_prune_limit(limit))

    def _prune(self, limit: int) -> int:
        """In transactions of at most PRUNE_TX jobs: each holds the database's
        one write lock, which the workers' cycles wait for."""
        pruned = 0
        while pruned < limit:
            want = min(PRUNE_TX, limit - pruned)
            left = want
            now = self.clock.now()
            with self._tx() as conn:
                found = conn.execute(Q["all_policies"])
                policies = {q: QueuePolicy.from_json(p) for q, p in found}
                for queue, state, keep in retention.rules(policies):
                    left -= conn.execute(Q["prune"], (queue, state, now - keep, left)).rowcount
                    if left == 0:
                        break
            pruned += want - left
            if left:
                break
        return pruned

    async def delete_queue(self, queue: str) -> int:
        check_name("queue", queue)

        def run() -> int:
            with self._tx() as conn:
                (active,) = conn.execute(Q["active_in_queue"], (queue,)).fetchone()
                if active:
                    raise queue_busy(queue, active)
                conn.execute(Q["delete_queue_attempts"], (queue,))
                deleted = conn.execute(Q["delete_queue_jobs"], (queue,)).rowcount
                conn.execute(Q["delete_queue_events"], (queue,))
                conn.execute(Q["empty_newest_event"], (queue,))
                conn.execute(Q["delete_queue"], (queue,))
                return int(deleted)

        return await self._run(run)

    async def get(self, job_id: str) -> Job:
        check_job_id(job_id)
        return await self._run(lambda: self._get(self.conn, job_id))

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        bounds = prefix_range(prefix)
        if bounds is None:
            return []
        query = Q["match_ids"]
        return await self._run(
            lambda: [i for (i,) in self.conn.execute(query, (*bounds, prefix, limit))]
        )

    def _get(self, conn: sqlite3.Connection, job_id: str) -> Job:
        row = conn.execute(Q["get_job"], (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        history = tuple(attempt_from_row(r) for r in conn.execute(Q["get_history"], (job_id,)))
        return job_from_row(row, history)

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        for clause, value in (("queue = ?", queue), ("state = ?", state)):
            if value is not None:
                where.append(clause)
                params.append(value)
        if (after := check_cursor(after)) is not None:
            where.append("seq < ?")
            params.append(cursor_seq(after))
        sql = Q["list_jobs"].replace("{where}", f"WHERE {' AND '.join(where)}" if where else "")

        def run() -> Page:
            rows = self.conn.execute(sql, (*params, limit + 1)).fetchall()
            jobs = [job_from_row(r[1:]) for r in rows[:limit]]
            cursor = str(rows[limit - 1][0]) if len(rows) > limit else None
            return Page(jobs, cursor)

        return await self._run(run)

    async def counts(self, queue: str) -> dict[State, int]:
        check_name("queue", queue)

        def run() -> dict[State, int]:
            found = dict(self.conn.execute(Q["counts"], (queue,)).fetchall())
            return {s: found.get(s.value, 0) for s in State}

        return await self._run(run)

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        check_name("queue", queue)

        def run() -> dict[DeadReason, int]:
            rows = self.conn.execute(Q["dead_counts"], (queue,)).fetchall()
            return {DeadReason(reason): n for reason, n in rows}

        return await self._run(run)

    async def lag(self, queue: str) -> float:
        check_name("queue", queue)

        def run() -> float:
            now = self.clock.now()
            (due_since,) = self.conn.execute(Q["due_since"], (queue, now)).fetchone()
            return 0.0 if due_since is None else max(now - due_since, 0.0)

        return await self._run(run)

    async def queues(self) -> builtins.list[str]:
        return await self._run(lambda: [n for (n,) in self.conn.execute(Q["queue_names"])])

    async def get_policy(self, queue: str) -> QueuePolicy:
        check_name("queue", queue)

        def run() -> QueuePolicy:
            row = self.conn.execute(Q["get_policy"], (queue,)).fetchone()
            return QueuePolicy.from_json(None if row is None else row[0])

        return await self._run(run)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        data = orjson.dumps(policy.to_dict()).decode()

        def run() -> None:
            with self._tx() as conn:
                conn.execute(Q["set_policy"], (queue, data))

        await self._run(run)

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        check_name("queue", queue)

        def run() -> QueuePolicy:
            with self._tx() as conn:  # the write lock, from the read to the write
                row = conn.execute(Q["get_policy"], (queue,)).fetchone()
                policy = QueuePolicy.from_json(None if row is None else row[0]).replace(**changes)
                conn.execute(Q["set_policy"], (queue, orjson.dumps(policy.to_dict()).decode()))
                self._ring(conn)  # it may let idle workers claim (a resume)
            return policy

        return await self._run(run)

    # -- workers -----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        await self._run(self._register_worker, info)

    def _register_worker(self, info: WorkerInfo) -> None:
        self._locks.hold(info.id)  # before the row exists, so a row always has its lock
        self.doorbells.listen(info.id)
        now = self.clock.now()
        with self._tx() as conn:
            conn.execute(
                Q["register_worker"],
                (info.id, info.hostname, info.pid, orjson.dumps(list(info.queues)).decode(),
                 now, now),
            )  # fmt: skip

    async def deregister_worker(self, worker_id: str) -> None:
        def run() -> None:
            with self._tx() as conn:
                conn.execute(Q["deregister_worker"], (worker_id,))
            self._locks.release(worker_id)
            self.doorbells.stop(worker_id)

        await self._run(run)

    def _seems_alive(self, worker_id: str) -> bool:
        """Whether the worker's lock is held; True when this user may not open
        lock files (a reader of the database only): then its heartbeat tells."""
        try:
            return self._locks.alive(worker_id)
        except PermissionError:
            return True

    async def workers(self) -> builtins.list[WorkerInfo]:
        def run() -> builtins.list[WorkerInfo]:
            leases = dict(self.conn.execute(Q["leases_held"]).fetchall())
            return [
                WorkerInfo(i, h, p, tuple(orjson.loads(q)), s, seen, leases.get(i, 0),
                           self._seems_alive(i))
                for i, h, p, q, s, seen in self.conn.execute(Q["list_workers"])
            ]  # fmt: skip

        return await self._run(run)
