"""Enqueue on PostgreSQL: new jobs, keyed ones, big batches by COPY, and ticks.

An enqueue's statements are written once, as steps (``steps.py``): run on a
pooled connection, each statement its own transaction, or on a caller's, in
the caller's transaction (``within.py``). A batch of ``COPY_FROM`` jobs or more
without ``key=`` goes by COPY instead. A periodic job's tick advances its
schedule and enqueues the job in one transaction, so it is enqueued once
across the fleet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from typing import Any

import orjson
import psycopg

from tenure.backends.base import Tick
from tenure.backends.checks import check_schedules, check_tick
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.flows import step_from_row
from tenure.backends.postgres.statements import text_array
from tenure.backends.postgres.steps import Steps, run_steps
from tenure.backends.postgres.wakeup import SCHEDULED
from tenure.core.states import State
from tenure.job import Job, JobSpec, check_specs

COPY_FROM = 100  # jobs in a batch from which COPY (5 round trips, less server time) wins
COPY_CHUNK = 200  # jobs per write of a COPY: the server stores one chunk while the next is made
COPY_NULL = "\\N"


class Enqueue:
    """New jobs, in the database of ``db``."""

    def __init__(self, db: Database, max_payload: int) -> None:
        self.db = db
        self.q = db.q
        self.max_payload = max_payload

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        if len(specs) >= COPY_FROM and all(s.key is None for s in specs):
            with contextlib.suppress(psycopg.errors.UniqueViolation):  # an id stored already
                return await self._copy(specs)
        async with self.db.conn() as conn:
            return await run_steps(conn, self.steps(specs))

    def steps(self, specs: Sequence[JobSpec]) -> Steps[list[Job]]:
        """The statements of an enqueue of checked specs, as steps (see steps.py):
        on a pooled connection, each its own transaction, or on a caller's, in
        the caller's transaction (within.py). Specs with a window of their key
        (debounce, unique_for) first look for the job they mean (_windows)."""
        windowed = any(s.debounce is not None or s.unique_for is not None for s in specs)
        while True:
            found: dict[str, Job] = {}
            stand_in: dict[str, str] = {}
            if windowed:
                found, stand_in = yield from self._windows(specs)
            todo = [s for s in specs if s.id not in found and s.id not in stand_in]
            now, inserted, kept = 0.0, set(), {}
            if todo:
                [(now, ids, _)] = yield self.q["insert_jobs"], self._columns(todo)
                inserted = set(ids or ())
                kept = yield from self._kept([s for s in todo if s.id not in inserted])
            made = {s.id: s.stored_at(now) for s in todo if s.id in inserted} | kept | found
            # A debounced spec that found its key's job not started (made since
            # _windows looked) debounces it: again.
            waiting = {State.SCHEDULED, State.QUEUED}
            again = any(s.debounce is not None and s.id in kept and kept[s.id].state in waiting
                        for s in todo)  # fmt: skip
            if not again and all(s.id in made or s.id in stand_in for s in specs):
                return [made[stand_in.get(s.id, s.id)] for s in specs]
            # The job that held a key finished between the two statements: again
            # (the jobs inserted now are found by id, the key is free).

    def _columns(self, specs: Sequence[JobSpec]) -> dict[str, Any]:
        """insert_jobs' parameters: a debounced job starts ``debounce`` from now."""
        jobs = orjson.dumps([
            [s.id, s.queue, s.task, s.priority, s.debounce or s.delay, s.run_at, s.key,
             s.max_attempts, s.timeout, s.traceparent, s.concurrency_key, s.debounce,
             s.unique_for] for s in specs
        ]).decode()  # fmt: skip
        args = text_array(s.args.decode() for s in specs)
        return {"jobs": jobs, "args": args, "channel": self.db.channel}

    def _windows(self, specs: Sequence[JobSpec]) -> Steps[tuple[dict[str, Job], dict[str, str]]]:
        """By spec id, the job stored already that each spec with a window means:
        the job of its key unfinished or finished within unique_for; the job of
        its key not started, debounced (its args the last spec's of the key in
        the batch). And the debounced specs that stand in for the last of their
        key in the batch, the one that is inserted if none is found."""
        unique = [s for s in specs if s.unique_for is not None]
        found: dict[str, Job] = {}
        if unique:
            holders = yield from self._holders(unique)
            found = {s.id: holders[s.queue, s.key] for s in unique if (s.queue, s.key) in holders}
        last = {(s.queue, s.key): s for s in specs if s.debounce is not None}
        if not last:
            return found, {}
        rows = yield self.q["debounce_jobs"], {
            "queues": [q for q, _ in last], "keys": [k for _, k in last],
            "args": text_array(s.args.decode() for s in last.values()),
            "delays": [s.debounce for s in last.values()],
        }  # fmt: skip
        moved = {(j.queue, j.key): j for j in map(step_from_row, rows)}
        stand_in: dict[str, str] = {}
        for s in specs:
            if s.debounce is not None and (s.queue, s.key) in moved:
                found[s.id] = moved[s.queue, s.key]
            elif s.debounce is not None and s is not last[s.queue, s.key]:
                stand_in[s.id] = last[s.queue, s.key].id
        return found, stand_in

    async def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        at = check_tick(schedule, at)
        check_specs([spec], self.max_payload)
        async with self.db.tx() as conn:
            return await run_steps(conn, self._ticking(schedule, at, spec))

    def _ticking(self, schedule: str, at: float, spec: JobSpec) -> Steps[Job | None]:
        advance = {"queue": spec.queue, "name": schedule, "tick": at, "job_id": spec.id}
        if not (yield self.q["advance_tick"], advance):
            return None
        [job] = yield from self.steps([spec])
        return job

    async def last_ticks(
        self, schedules: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], Tick]:
        pairs = check_schedules(schedules)
        params = {"queues": [q for q, _ in pairs], "names": [n for _, n in pairs]}
        rows = await self.db.rows("last_ticks", params)
        return {(q, n): Tick(at, job_id) for q, n, at, job_id in rows}

    async def _copy(self, specs: Sequence[JobSpec]) -> list[Job]:
        """A batch without key=: COPY, in one transaction (UniqueViolation if an
        id is stored already)."""
        q = self.q
        queues = list(dict.fromkeys(s.queue for s in specs))
        async with self.db.tx() as conn:
            cur = await conn.execute(q["begin_copy"], {"queues": queues})
            [now] = await cur.fetchone() or (0.0,)
            jobs: list[Job] = []
            async with cur.copy(q["copy_jobs"]) as copy:
                # In chunks: the server stores one while the next is made.
                for start in range(0, len(specs), COPY_CHUNK):
                    chunk = specs[start : start + COPY_CHUNK]
                    made = [s.stored_at(now) for s in chunk]
                    await copy.write(_copy_rows(chunk, made))
                    jobs += made
            await self.db.notify(conn, _woken(jobs))
            await conn.execute(q["record_enqueued"], _enqueued_rows(jobs))
        return jobs

    def _holders(self, specs: Sequence[JobSpec]) -> Steps[dict[tuple[str, str | None], Job]]:
        """The job that holds the key of each spec (queue and key=): unfinished,
        or finished within the spec's unique_for."""
        params = {"queues": [s.queue for s in specs], "keys": [s.key for s in specs],
                  "windows": [s.unique_for for s in specs]}  # fmt: skip
        rows = yield self.q["find_unfinished_by_keys"], params
        return {(j.queue, j.key): j for j in (step_from_row(r[:-1]) for r in rows)}

    def _kept(self, specs: list[JobSpec]) -> Steps[dict[str, Job]]:
        """By spec id, the job stored already of each spec that inserted nothing:
        the unfinished job that holds its key, or else the job with its id."""
        found: dict[str, Job] = {}
        keyed = [s for s in specs if s.key is not None]
        if keyed:
            holders = yield from self._holders(keyed)
            found = {s.id: holders[s.queue, s.key] for s in keyed if (s.queue, s.key) in holders}
        if ids := [s.id for s in specs if s.id not in found]:
            rows = yield self.q["find_by_ids"], {"ids": ids}
            found |= {j.id: j for j in map(step_from_row, rows)}
        return found


def _woken(jobs: Sequence[Job]) -> set[str]:
    """What new jobs NOTIFY, as insert_jobs' woken does: a queued job's queue;
    SCHEDULED for a job scheduled for later (it wakes no waiter)."""
    return {j.queue if j.state is State.QUEUED else SCHEDULED for j in jobs
            if j.state in (State.QUEUED, State.SCHEDULED)}  # fmt: skip


def _enqueued_rows(jobs: Sequence[Job]) -> dict[str, str]:
    """The parameters of record_enqueued: per queue, its jobs' ids and their
    events' data, once for all when they share it (a batch usually does)."""
    by_queue: dict[str, list[Job]] = {}
    for j in jobs:
        by_queue.setdefault(j.queue, []).append(j)
    data = []
    for run in by_queue.values():
        each = [{"task": j.task, "state": j.state.value} for j in run]
        data.append(orjson.dumps({"all": each[0]} if each.count(each[0]) == len(each) else each))
    ids = [orjson.dumps([j.id for j in run]).decode() for run in by_queue.values()]
    return {"queues": text_array(by_queue), "jobs": text_array(ids),
            "data": text_array(d.decode() for d in data)}  # fmt: skip


def _copy_rows(specs: Sequence[JobSpec], jobs: Sequence[Job]) -> bytes:
    """New jobs as rows of copy_jobs, in COPY's text format. Names are validated
    (no tab, newline or backslash); in JSON, backslashes are doubled and the
    whitespace COPY reads as a separator escaped; floats are written in their
    shortest exact form. The columns after the arguments are written once for
    a run of jobs that share them (a batch usually does)."""
    rows = []
    shared: tuple[Any, ...] = ()
    tail = ""
    for s, j in zip(specs, jobs, strict=True):
        args = s.args.decode()
        if "\\" in args:
            args = args.replace("\\", "\\\\")
        if "\t" in args or "\n" in args or "\r" in args:  # not from orjson: it writes none
            args = args.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
        values = (j.state, j.priority, j.run_at, j.created_at, j.max_attempts, j.timeout,
                  j.traceparent, j.concurrency_key)  # fmt: skip
        if values != shared:
            shared = values
            tail = (
                f"\t{j.state.value}\t{j.priority}\t{j.run_at!r}\t{j.created_at!r}"
                f"\t{_copy_value(j.max_attempts)}\t{_copy_value(j.timeout)}"
                f"\t{j.traceparent or COPY_NULL}\t{_copy_text(j.concurrency_key)}\n"
            )
        rows.append(f"{j.id}\t{j.queue}\t{j.task}\t{args}{tail}")
    return "".join(rows).encode()


def _copy_value(value: int | float | None) -> str:
    return COPY_NULL if value is None else repr(value)


def _copy_text(value: str | None) -> str:
    """Text in COPY's format: a concurrency key has no control character, but
    may hold a backslash."""
    return COPY_NULL if value is None else value.replace("\\", "\\\\")
