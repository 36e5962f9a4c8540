"""The database one PostgreSQL backend works in, as each of its parts reaches it.

Where it is (``endpoints``: the pool's address, and the sessions'), tenure's
schema in it and the names made of that schema (the wake-up channel, the
advisory locks' namespace), the statements for the schema, and the pool from
``open`` to ``close``. A driver's error that means the server cannot be
reached becomes BackendUnavailable here, in one line and without the
password: libpq's messages may quote the connection string.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import AsyncIterator, Collection
from typing import Any

import psycopg

from tenure.backends.postgres.pool import Pool, server_full
from tenure.backends.postgres.statements import Statements
from tenure.backends.postgres.url import Endpoints
from tenure.core.urls import one_line, redacted, scrub
from tenure.errors import BackendUnavailable, ServerFull

# -> BackendUnavailable (PoolTimeout is an OperationalError). The server ending a
# session that idled in its transaction (IDLE_MS: its worker froze) is 25P03,
# an InternalError to psycopg, but to the worker the same: that connection is gone.
UNREACHABLE = (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)
# A call waits this long for a connection while all of the pool's are in use.
POOL_WAIT = 5.0
# How long a transaction of several statements that others wait on (a sweep, a
# limited queue's claim) may idle before the server ends it: its worker froze.
IDLE_MS = "1000"


class Database:
    """tenure's schema ``schema`` in the database ``endpoints`` reach."""

    def __init__(self, endpoints: Endpoints, schema: str) -> None:
        self.endpoints = endpoints
        self.conninfo = endpoints.pool
        self.safe_url = redacted(endpoints.pool)
        self.schema = schema
        self.namespace = zlib.crc32(f"tenure:{schema}".encode()) & 0x7FFFFFFF
        self.channel = f"tenure.{schema}"
        self.q = Statements({"schema": schema, "channel": self.channel})
        self.pool: Pool | None = None  # from open to close

    async def open(self, size: int) -> None:
        """Make the pool and its first connection, directly: a failure says the
        server's reason at once, or within ``connect_timeout``."""
        pooled = self.endpoints.pooled  # no session state: nothing to set up
        pool = Pool(self.conninfo, size=size, wait=POOL_WAIT, options=self.endpoints.pool_options(),
                    configure=_nothing if pooled else _configure)  # fmt: skip
        try:
            await pool.putconn(await pool.getconn())
        except UNREACHABLE as exc:
            await pool.close()
            raise self.unavailable(f"cannot connect to {self.safe_url}", exc) from None
        self.pool = pool

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    def opened(self) -> Pool:
        """The pool; BackendUnavailable before ``open`` and after ``close``."""
        if self.pool is None:
            raise BackendUnavailable("the PostgreSQL backend is not open")
        return self.pool

    def unavailable(self, what: str, exc: BaseException) -> BackendUnavailable:
        """BackendUnavailable for a driver's error, in one line and without the
        password; ServerFull for the server's refusal of one more connection."""
        text = one_line(scrub(scrub(str(exc), self.conninfo), self.endpoints.session))
        return (ServerFull if server_full(exc) else BackendUnavailable)(f"{what}: {text}")

    @contextlib.asynccontextmanager
    async def conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit mode: each statement is its own
        transaction, one round trip. Storage errors become BackendUnavailable."""
        pool = self.opened()
        try:
            async with pool.connection() as conn:
                yield conn
        except UNREACHABLE as exc:
            raise self.unavailable("PostgreSQL is unavailable", exc) from exc

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction, for verbs of several statements."""
        async with self.conn() as conn, conn.transaction():
            yield conn

    async def rows(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of one named statement (one round trip, atomic on its own)."""
        async with self.conn() as conn:
            cur = await conn.execute(self.q[name], params)
            return await cur.fetchall()

    async def notify(self, conn: psycopg.AsyncConnection[Any], queues: Collection[str]) -> None:
        """Wake idle workers of these queues when the transaction commits."""
        if queues:
            await conn.execute(self.q["notify"], {"channel": self.channel, "queues": list(queues)})


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Prepared statements keep one generic plan: the worker's statements run
    thousands of times a second, and planning the cycle costs more than running
    it (0.46 ms against 0.31 ms). Behind a transaction pooler nothing is
    prepared, and a session's setting would land on whichever server
    connection the pooler gave: it is not sent (``_nothing``)."""
    with contextlib.suppress(psycopg.errors.UndefinedObject):  # before PostgreSQL 12
        await conn.execute("SET plan_cache_mode = force_generic_plan")


async def _nothing(conn: psycopg.AsyncConnection[Any]) -> None:
    """A pooler's connection keeps no session state: nothing to set up."""
