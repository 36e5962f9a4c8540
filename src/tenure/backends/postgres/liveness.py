"""Workers on PostgreSQL: their registration, heartbeats and proof of life.

Each registered worker holds the session advisory lock ``(namespace,
lock_no)`` on its backend's liveness session (``Liveness``, ``session.py``).
PostgreSQL drops the lock the moment that session ends (the process died, the
connection was cut or terminated), and ``pg_locks`` shows the sweeper of any
other worker that it is gone. Every heartbeat runs on that session, so a
worker whose connection dropped learns it at once and re-registers under a
new identity. ``Workers``
is the protocol's verbs on them: register, deregister, list, heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from typing import Any

import orjson
import psycopg

from tenure.backends.base import LeaseRef, Renewal, WorkerInfo
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.session import Session
from tenure.core.names import check_name
from tenure.core.urls import one_line
from tenure.errors import BackendUnavailable, LivenessLost, ServerFull

# Seconds an idle worker's heartbeat (no lease held) may go without a round
# trip: its liveness session's socket tells a goodbye at once (seems_lost); the
# round trip proves it against a silent loss, and marks the worker seen.
IDLE_PROOF = 5.0


class Workers:
    """Registered workers: each one's row, and its lock held by ``liveness``."""

    def __init__(self, db: Database, liveness: Liveness) -> None:
        self.db = db
        self.liveness = liveness
        self._proven: dict[str, float] = {}  # worker id -> when its session last answered

    async def register(self, info: WorkerInfo) -> None:
        check_name("worker", info.id)
        [(lock_no,)] = await self.db.rows("next_lock_no")
        try:  # the lock before the row: a registered worker always has its lock
            await self.liveness.hold(info.id, lock_no)
        except psycopg.OperationalError as exc:
            error = self.db.unavailable("cannot open the liveness connection", exc)
            if isinstance(error, ServerFull):  # the caller waits: holding nothing
                await self.db.opened().shed()
            raise error from exc
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
        self._proven.pop(worker_id, None)

    async def workers(self) -> list[WorkerInfo]:
        return [
            WorkerInfo(i, h, p, tuple(orjson.loads(q)), s, seen, n, alive)
            for i, h, p, q, s, seen, n, alive in await self.db.rows(
                "list_workers", {"namespace": self.db.namespace}
            )
        ]

    async def heartbeat(self, worker_id: str, leases: Collection[LeaseRef]) -> Renewal:
        """One statement, on the worker's liveness session when it has one: its
        answer is also the proof that the session lives (one transaction). A
        worker that holds no lease, proven within IDLE_PROOF, is answered from
        its session's socket (``seems_lost``), without a round trip."""
        held = list(leases)
        now = time.monotonic()
        recent = now - self._proven.get(worker_id, -IDLE_PROOF) < IDLE_PROOF
        if not held and recent and not self.liveness.seems_lost(worker_id):
            return Renewal(frozenset(), frozenset())
        params = {"worker": worker_id, "ids": [i for i, _ in held], "fences": [f for _, f in held]}
        try:
            rows = await self.liveness.prove(worker_id, self.db.q["heartbeat"], params)
        except psycopg.Error as exc:
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc
        if rows is None:  # not registered here
            rows = await self.db.rows("heartbeat", params)
        else:
            self._proven[worker_id] = now
        lost = set(held) - {(i, f) for i, f, _ in rows}
        return Renewal(frozenset(lost), frozenset((i, f) for i, f, cancel in rows if cancel))


class Liveness:
    """The advisory locks of the workers registered through this backend, on
    its liveness session (``session.py``), which also listens for wake-ups."""

    def __init__(self, session: Session, namespace: int) -> None:
        self.session = session
        self.namespace = namespace
        self._locks: dict[str, int] = {}  # worker id -> lock_no
        self._retired: set[str] = set()  # ids this backend held and no longer does
        self._lock = asyncio.Lock()

    async def hold(self, worker_id: str, lock_no: int) -> None:
        """Take the worker's lock, on the session, until release or close; a
        session lost is made again first, and the ids it held are retired."""
        async with self._lock:
            if self.session.gone():
                await self._reconnect()
            await self.session.execute("SELECT pg_advisory_lock(%s, %s)", (self.namespace, lock_no))
            self._locks[worker_id] = lock_no

    async def _reconnect(self) -> None:
        self._retired.update(self._locks)
        self._locks.clear()
        await self.session.connect()

    async def listen(self) -> bool:
        """Whether the session listens for wake-ups, made if there is none and
        it would hold no worker's lock: a worker whose session was lost
        registers again, which makes the new one, and until then claims
        nothing."""
        if not self.session.gone():
            return True
        if self._locks:
            return False
        async with self._lock:
            if self.session.gone() and not self._locks:
                with contextlib.suppress(psycopg.Error):
                    await self._reconnect()
        return not self.session.gone()

    async def prove(self, worker_id: str, query: bytes, params: dict[str, Any]) -> list[Any] | None:
        """The rows of ``query`` run on the session of ``worker_id``'s lock, which
        its answer proves alive; LivenessLost if that session is gone; None if
        the worker is not registered here (nothing to prove)."""
        if worker_id not in self._locks:
            return None
        try:
            # A goodbye already here is taken as such, without a query: while
            # the query is out, seems_lost cannot read the socket, and claims
            # would go on under this identity until its answer.
            if self.session.gone():
                raise psycopg.OperationalError("the server closed the connection")
            return await self.session.execute(query, params)
        except psycopg.Error as exc:
            if not self.session.gone():
                raise  # the statement failed, not the session
            raise LivenessLost(
                f"the liveness connection of worker {worker_id} dropped ({one_line(str(exc))}); "
                "its leases may be recovered by others at any moment"
            ) from exc

    async def answers(self, worker_id: str) -> bool:
        """Whether ``worker_id``'s session answers a round trip now (an id not
        registered here has nothing to prove: True)."""
        if self.seems_lost(worker_id):
            return False
        if worker_id not in self._locks:
            return True
        try:
            await self.session.execute("SELECT 1")
        except psycopg.Error:
            return not self.session.gone()
        return True

    def seems_lost(self, worker_id: str) -> bool:
        """Without a round trip: whether ``worker_id``'s session is known to be
        gone, or its idle socket holds the server's goodbye (a restart). An id
        this backend held once and no longer holds is gone: a claim that took it
        before the worker registered again must not land under it."""
        if worker_id in self._retired:
            return True
        if worker_id not in self._locks:
            return False
        return self.session.gone()

    async def release(self, worker_id: str) -> None:
        async with self._lock:
            lock_no = self._locks.pop(worker_id, None)
            self._retired.add(worker_id)
            if lock_no is not None and not self.session.gone():
                with contextlib.suppress(psycopg.Error):
                    await self.session.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", (self.namespace, lock_no)
                    )

    async def close(self) -> None:
        """End the session: every lock it held is released, as at a kill -9."""
        await self.session.close()
        self._retired.update(self._locks)
        self._locks.clear()
