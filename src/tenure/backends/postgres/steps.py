"""A verb's statements as steps, run on a connection sync or async.

A verb that may run on a caller's connection (an enqueue in the caller's
transaction) is written once, as a generator: it yields ``(query, params)``
and is sent back that statement's rows; what it returns is the verb's result.
``run_steps`` drives it on an async connection, ``run_steps_sync`` on a
sync one, so the statements and what is made of their rows exist once.

Rows come back as tuples whatever row factory the connection has.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row

T = TypeVar("T")
Step = tuple[bytes, dict[str, Any]]
Steps = Generator[Step, list[Any], T]


async def run_steps(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    """Run ``steps`` on ``conn``; each statement is sent as it comes."""
    cur = conn.cursor(row_factory=tuple_row)
    try:
        step = next(steps)
        while True:
            await cur.execute(*step)
            step = steps.send(await cur.fetchall())
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        await cur.close()


def run_steps_sync(conn: psycopg.Connection[Any], steps: Steps[T]) -> T:
    """``run_steps`` on a sync connection, in the calling thread."""
    cur = conn.cursor(row_factory=tuple_row)
    try:
        step = next(steps)
        while True:
            cur.execute(*step)
            step = steps.send(cur.fetchall())
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        cur.close()
