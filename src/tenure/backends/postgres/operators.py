"""The operators' verbs on PostgreSQL: cancel, dead-letter handling, queues,
reading jobs and counts, and queues' policies. Each is one transaction."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from tenure.backends.base import Page
from tenure.backends.checks import (
    check_cursor,
    check_listing,
    check_match,
    check_retried_by,
    cursor_seq,
    not_cancellable,
    prefix_range,
    queue_busy,
)
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.flows import restoring, step_from_row
from tenure.backends.postgres.steps import run_steps
from tenure.backends.rows import attempt_from_row
from tenure.config import QueuePolicy
from tenure.core.events import RetriedBy
from tenure.core.limits import KeyCount
from tenure.core.names import check_job_id, check_job_ids, check_name
from tenure.core.states import DeadReason, State
from tenure.core.workflows import ENDED, WorkflowState
from tenure.errors import JobNotFound
from tenure.job import Job


class Operators:
    """What an operator (CLI, web, Python) does to jobs and queues, through ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.q = db.q

    async def cancel(self, job_id: str) -> Job:
        check_job_id(job_id)
        async with self.db.tx() as conn:
            params = {"id": job_id, "channel": self.db.channel}
            cur = await conn.execute(self.q["cancel"], params)
            cancelled = await cur.fetchone() is not None
        job = await self.get(job_id)
        if not cancelled:
            raise not_cancellable(job)
        return job

    async def retry_dead(
        self, queue: str, job_ids: Sequence[str] | None = None, by: str = RetriedBy.PYTHON
    ) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        retried_by = check_retried_by(by).value
        async with self.db.tx() as conn:
            params = {"queue": queue, "ids": ids, "by": retried_by}
            cur = await conn.execute(self.q["retry_dead"], params)
            rows = await cur.fetchall()
            await self.db.notify(conn, [queue] if rows else [])
            steps = [i for i, workflow in rows if workflow is not None]
            if steps:  # what failed for them waits again
                await run_steps(conn, restoring(self.db, steps))
        return len(rows)

    async def purge_dead(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        check_name("queue", queue)
        ids = check_job_ids(job_ids)
        async with self.db.tx() as conn:
            params = {"queue": queue, "ids": ids}
            cur = await conn.execute(self.q["purge_dead"], params)
            [(purged,)] = await cur.fetchall()
            return int(purged)

    async def delete_queue(self, queue: str) -> int:
        check_name("queue", queue)
        async with self.db.tx() as conn:
            cur = await conn.execute(self.q["delete_queue_jobs"], {"queue": queue})
            [(deleted,)] = await cur.fetchall()
            cur = await conn.execute(self.q["active_in_queue"], {"queue": queue})
            [(active,)] = await cur.fetchall()
            if active:
                raise queue_busy(queue, active)  # rolls the transaction back
            await conn.execute(self.q["delete_queue"], {"queue": queue})
        return int(deleted)

    async def get(self, job_id: str) -> Job:
        check_job_id(job_id)
        async with self.db.tx() as conn:
            cur = await conn.execute(self.q["get_job"], {"id": job_id})
            row = await cur.fetchone()
            if row is None:
                raise JobNotFound(f"no job with id {job_id!r}")
            cur = await conn.execute(self.q["get_history"], {"id": job_id})
            history = tuple(attempt_from_row(r) for r in await cur.fetchall())
        return step_from_row(row, history)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        prefix, limit = check_match(prefix, limit)
        bounds = prefix_range(prefix)
        if bounds is None:
            return []
        low, high = bounds
        params = {"low": low, "high": high, "prefix": prefix, "limit": limit}
        return [i for (i,) in await self.db.rows("match_ids", params)]

    async def list(
        self,
        queue: str | None = None,
        state: State | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        state = check_listing(queue, state, limit)
        after = check_cursor(after)
        params = {"queue": queue, "state": None if state is None else state.value,
                  "after": None if after is None else cursor_seq(after),
                  "limit": limit + 1}  # fmt: skip
        rows = await self.db.rows("list_jobs", params)
        jobs = [step_from_row(r[1:]) for r in rows[:limit]]
        return Page(jobs, str(rows[limit - 1][0]) if len(rows) > limit else None)

    async def counts(self, queue: str) -> dict[State, int]:
        check_name("queue", queue)
        found = dict(await self.db.rows("counts", {"queue": queue}))
        return {s: found.get(s.value, 0) for s in State}

    async def key_counts(self, queue: str, limit: int) -> builtins.list[KeyCount]:
        check_listing(queue, None, limit)
        rows = await self.db.rows("key_counts", {"queue": queue, "limit": limit})
        return [KeyCount(*row) for row in rows]

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        check_name("queue", queue)
        rows = await self.db.rows("dead_counts", {"queue": queue})
        return {DeadReason(reason): n for reason, n in rows}

    async def lag(self, queue: str) -> float:
        check_name("queue", queue)
        [(seconds,)] = await self.db.rows("lag", {"queue": queue})
        return float(seconds)

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        found = dict(await self.db.rows("workflow_counts"))
        return {s: found.get(s.value, 0) for s in WorkflowState}

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        found = dict(await self.db.rows("workflow_outcomes"))
        return {s: found.get(s.value, 0) for s in ENDED}

    async def queues(self) -> builtins.list[str]:
        return [n for (n,) in await self.db.rows("queue_names")]

    async def get_policy(self, queue: str) -> QueuePolicy:
        check_name("queue", queue)
        rows = await self.db.rows("get_policy", {"queue": queue})
        return QueuePolicy.from_json(rows[0][0] if rows else None)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        check_name("queue", queue)
        policy.validate()
        data = orjson.dumps(policy.to_dict()).decode()
        async with self.db.tx() as conn:
            await conn.execute(self.q["set_policy"], {"queue": queue, "policy": data})

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        check_name("queue", queue)
        async with self.db.tx() as conn:  # the queue's row stays locked until commit
            cur = await conn.execute(self.q["lock_policy"], {"queue": queue})
            [(stored,)] = await cur.fetchall()
            policy = QueuePolicy.from_json(stored).replace(**changes)
            data = orjson.dumps(policy.to_dict()).decode()
            await conn.execute(self.q["set_policy"], {"queue": queue, "policy": data})
            await self.db.notify(conn, [queue])  # it may let idle workers claim (a resume)
        return policy
