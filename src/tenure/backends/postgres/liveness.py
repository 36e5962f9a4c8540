"""Workers on PostgreSQL: their registration, heartbeats and proof of life.

Each registered worker holds the session advisory lock ``(namespace,
lock_no)`` on a connection of its own (``Liveness``). PostgreSQL drops the lock
the moment that session ends (the process died, the connection was cut or
terminated), and ``pg_locks`` shows the sweeper of any other worker that it is
gone. Every heartbeat checks the connection, so a worker whose connection
dropped learns it at once and re-registers under a new identity. ``Workers``
is the protocol's verbs on them: register, deregister, list, heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

import orjson
import psycopg

from tenure.backends.base import LeaseRef, Renewal, WorkerInfo
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.pool import hung_up
from tenure.core.names import check_name
from tenure.errors import BackendUnavailable, LivenessLost


class Workers:
    """Registered workers: each one's row, and its lock held by ``liveness``."""

    def __init__(self, db: Database, liveness: Liveness) -> None:
        self.db = db
        self.liveness = liveness

    async def register(self, info: WorkerInfo) -> None:
        check_name("worker", info.id)
        [(lock_no,)] = await self.db.rows("next_lock_no")
        try:  # the lock before the row: a registered worker always has its lock
            await self.liveness.hold(info.id, lock_no)
        except psycopg.OperationalError as exc:
            raise self.db.unavailable("cannot open the liveness connection", exc) from exc
        if self.db.endpoints.pooled:
            await self._seen(lock_no)
        async with self.db.tx() as conn:
            await conn.execute(self.db.q["register_worker"], {
                "id": info.id, "lock_no": lock_no, "hostname": info.hostname, "pid": info.pid,
                "queues": orjson.dumps(list(info.queues)).decode()})  # fmt: skip

    async def _seen(self, lock_no: int) -> None:
        """BackendUnavailable unless the pool's database sees the lock the
        liveness session took: else every sweeper would take this worker for
        dead (a liveness_url to another server or database). Unavailable, not
        invalid: in a failover one side may move before the other, and the
        worker retries."""
        [(seen,)] = await self.db.rows(
            "liveness_seen", {"namespace": self.db.namespace, "lock_no": lock_no}
        )
        if not seen:
            raise BackendUnavailable(
                f"the liveness session's lock is not seen through {self.db.safe_url}: "
                "liveness_url must reach the PostgreSQL database the URL's pooler serves"
            )

    async def deregister(self, worker_id: str) -> None:
        async with self.db.tx() as conn:
            await conn.execute(self.db.q["deregister_worker"], {"id": worker_id})
        await self.liveness.release(worker_id)

    async def workers(self) -> list[WorkerInfo]:
        return [
            WorkerInfo(i, h, p, tuple(orjson.loads(q)), s, seen, n, alive)
            for i, h, p, q, s, seen, n, alive in await self.db.rows(
                "list_workers", {"namespace": self.db.namespace}
            )
        ]

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        await self.liveness.check(worker_id)
        held = list(leases)
        params = {"worker": worker_id, "ids": [i for i, _ in held], "fences": [f for _, f in held]}
        rows = await self.db.rows("heartbeat", params)
        lost = set(held) - {(i, f) for i, f, _ in rows}
        return Renewal(frozenset(lost), frozenset((i, f) for i, f, cancel in rows if cancel))


class Liveness:
    """The advisory locks of the workers registered through this backend, on one session."""

    def __init__(self, conninfo: str, namespace: int) -> None:
        self.conninfo = conninfo
        self.namespace = namespace
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._locks: dict[str, int] = {}  # worker id -> lock_no
        self._retired: set[str] = set()  # ids this backend held and no longer does
        self._lost = False
        self._lock = asyncio.Lock()

    async def hold(self, worker_id: str, lock_no: int) -> None:
        """Take the worker's lock, on the liveness connection, until release or close."""
        async with self._lock:
            if self._conn is None or self._conn.closed or self._lost or hung_up(self._conn):
                await self._reconnect()
            assert self._conn is not None
            await self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (self.namespace, lock_no))
            self._locks[worker_id] = lock_no

    async def _reconnect(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        self._conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name="tenure-liveness"
        )
        self._retired.update(self._locks)
        self._locks.clear()
        self._lost = False

    async def check(self, worker_id: str) -> None:
        """Raise LivenessLost unless ``worker_id``'s lock is still held by a live session."""
        if worker_id not in self._locks:
            return  # not registered here: nothing to prove
        async with self._lock:
            try:
                assert self._conn is not None
                # A goodbye already here is taken as such, without a query: while
                # the query is out, seems_lost cannot poll, and claims would go on
                # under this identity until its answer.
                if hung_up(self._conn):
                    raise psycopg.OperationalError("the server closed the connection")
                await self._conn.execute("SELECT 1")
            except (psycopg.Error, AssertionError) as exc:
                self._lost = True
                raise LivenessLost(
                    f"the liveness connection of worker {worker_id} dropped ({exc}); "
                    "its leases may be recovered by others at any moment"
                ) from exc

    def seems_lost(self, worker_id: str) -> bool:
        """Without a round trip: whether ``worker_id``'s session is known to be
        gone, or its idle socket holds the server's goodbye (a restart). An id
        this backend held once and no longer holds is gone: a claim that took it
        before the worker registered again must not land under it."""
        if worker_id in self._retired:
            return True
        if worker_id not in self._locks:
            return False
        if self._lost or self._conn is None or self._conn.closed:
            return True
        return not self._lock.locked() and hung_up(self._conn)

    async def release(self, worker_id: str) -> None:
        async with self._lock:
            lock_no = self._locks.pop(worker_id, None)
            self._retired.add(worker_id)
            if lock_no is not None and self._conn is not None and not self._conn.closed:
                with contextlib.suppress(psycopg.Error):
                    await self._conn.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", (self.namespace, lock_no)
                    )

    async def close(self) -> None:
        """End the session: every lock it held is released, as at a kill -9."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        self._retired.update(self._locks)
        self._locks.clear()
