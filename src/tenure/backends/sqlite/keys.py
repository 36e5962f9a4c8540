"""Concurrency keys on SQLite (QueuePolicy's ``_per_key`` limits and ``fair``):
what a keyed queue's claim takes, key by key, and each key's counts.

A claim takes a keyed queue's share (its own limits decided first, as any
queue's) through indexes only:

- not fair: the queue's next jobs in claim order (a window of them, through
  jobs_ready), each taken unless its key is held (at ``max_active_per_key``,
  or out of tokens). When held keys fill the window, the keys that may start
  take turns as in a fair claim: a held key never holds back others.
- fair: the keys in turn after the queue's cursor (the last key served), a
  job each per round, a key's own jobs by priority then run_at.

A key's active jobs are counted through jobs_keyed (at most its
limit, unless the limit came down), so an ended attempt frees its place as
its state changes, in the transaction that ends it. Its rate bucket is a row
of key_buckets. In a keyed queue a job without a key is stored under ''
(UNKEYED; a key is never empty), one key of its own, in the same indexes.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from tenure.backends.rows import JOB_COLUMNS, job_from_row
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core import limits
from tenure.core.limits import KeyCount
from tenure.job import Attempt, Job, keyed

N = len(JOB_COLUMNS)  # a row's concurrency key follows the job's columns
UNKEYED = ""  # the key a keyed queue's rows give its jobs without one
WALK = 64  # keys read per keys_after
NO_SKIP = "[]"

Pick = tuple[int, str, int, float]  # a due job: seq, stored key, priority, run_at


def job_of_row(row: Sequence[Any], history: tuple[Attempt, ...] = ()) -> Job:
    """The job of a row of ``{job_columns}`` (its concurrency key last)."""
    return keyed(job_from_row(row[:N], history), row[N] or None)


def policy_changed(
    conn: sqlite3.Connection, queue: str, was: QueuePolicy, now: QueuePolicy
) -> None:
    """A queue's policy changed: if it became keyed, its jobs without a key
    are stored under UNKEYED from now on (and those to come: queues.keyed)."""
    if now.keyed != was.keyed:
        conn.execute(Q["set_keyed"], (now.keyed, queue))
        if now.keyed:
            conn.execute(Q["key_the_unkeyed"], (queue,))


class Gate:
    """One keyed queue's claim: the places each of its keys has left."""

    def __init__(
        self, conn: sqlite3.Connection, queue: str, policy: QueuePolicy, share: int, now: float
    ) -> None:
        self.conn, self.queue, self.policy, self.share, self.now = conn, queue, policy, share, now
        self.left: dict[str, int] = {}
        self.tokens: dict[str, float] = {}
        self.heads: dict[str, int | None] = {}  # each walked key's next due job (seq)
        self.picks: list[Pick] = []
        self.turns = policy.fair  # whether its keys took turns (the cursor moves)

    def left_for(self, key: str | None) -> int:
        """How many jobs of ``key`` (counted) this claim may take."""
        return self.share if key is None or key == UNKEYED else self.left[key]

    def count(self, keys: Iterable[str | None], active: Mapping[str, int] | None = None) -> None:
        """Count the places ``keys`` have left (``active``: their active jobs,
        if counted already): a statement or two for them all."""
        new = list({k for k in keys if k and k not in self.left})
        if not new:
            return
        policy, listed = self.policy, orjson.dumps(new)
        if active is None and policy.max_active_per_key is not None:
            active = dict(self.conn.execute(Q["active_of_keys"], (self.queue, listed)).fetchall())
        stored: dict[str, tuple[float, float]] = {}
        if policy.rate_limit_per_key is not None:
            found = self.conn.execute(Q["key_buckets"], (self.queue, listed)).fetchall()
            stored = {k: (tokens, at) for k, tokens, at in found}
        for key in new:
            tokens = None
            if policy.rate_limit_per_key is not None:
                held, at = stored.get(key, (None, None))
                tokens = self.tokens[key] = limits.refilled(
                    policy, held, at, self.now, per_key=True
                )
            used = 0 if active is None else active.get(key, 0)
            self.left[key] = limits.key_allowance(policy, self.share, used, tokens)

    def jobs(self, key: str, skip: str, n: int) -> list[Pick]:
        """The next ``n`` due jobs of ``key``."""
        return self.conn.execute(Q["key_jobs"], (self.queue, key, skip, n)).fetchall()

    def cycle(self, after: str | None, skip: str) -> Iterator[str]:
        """Each key with due jobs once, counted, in turn after key ``after``
        (None: from the first): UNKEYED, then the others in order, round."""
        if after is None:
            yield UNKEYED
            yield from self._walk(UNKEYED, None, skip)
            return
        yield from self._walk(after, None, skip)
        yield UNKEYED
        if after != UNKEYED:
            yield from self._walk(UNKEYED, after, skip)

    def _walk(self, after: str, upto: str | None, skip: str) -> Iterator[str]:
        """The keys with due jobs after ``after``, up to ``upto`` (None: all)."""
        size = min(self.share + 1, WALK)  # a fair claim's keys, most often
        while True:
            rows = self.conn.execute(Q["keys_after"], (self.queue, after, size, skip)).fetchall()
            self.count([k for k, _, _ in rows], {k: n for k, n, _ in rows})
            self.heads.update((k, head) for k, _, head in rows)
            for key, _, _ in rows:
                if upto is not None and key > upto:
                    return
                yield key
            if len(rows) < size:
                return
            after = rows[-1][0]
            size = WALK

    def head(self, key: str, skip: str) -> list[Pick]:
        """The next due job of ``key``, as its walk found it."""
        if key not in self.heads:  # UNKEYED: no walk reads it
            return self.jobs(key, skip, 1)
        seq = self.heads[key]
        return [] if seq is None else [(seq, key, 0, 0.0)]

    def took(self, taken: Sequence[Pick]) -> None:
        """The claim took ``taken`` (of its picks, in claim order): each key's
        bucket pays a token per start; if keys took turns, the cursor moves to
        the last key served."""
        if not taken:
            return
        if self.policy.rate_limit_per_key is not None:
            started = Counter(p[1] for p in taken if p[1])
            self.conn.executemany(
                Q["take_from_key_bucket"],
                [(self.queue, k, self.tokens[k] - n, self.now) for k, n in started.items()],
            )
        if self.turns:
            self.conn.execute(Q["set_key_cursor"], (taken[-1][1], self.queue))


def pick(gate: Gate, skip: str) -> list[Pick]:
    """The jobs a claim takes from ``gate``'s queue, in claim order."""
    gate.picks = _fair(gate, skip) if gate.policy.fair else _in_order(gate, skip)
    return gate.picks


def _in_order(gate: Gate, skip: str) -> list[Pick]:
    """The next jobs in claim order whose keys may start."""
    share = gate.share
    window = 4 * share + 32
    cursor = gate.conn.execute(Q["keyed_window"], (gate.queue, skip, window))
    taken: Counter[str] = Counter()
    picks: list[Pick] = []
    read = 0
    while rows := cursor.fetchmany(share):  # counted a share at a time: most claims need one
        read += len(rows)
        gate.count(r[1] for r in rows)
        for row in rows:
            key = row[1]
            if taken[key] < gate.left_for(key):
                taken[key] += 1
                picks.append(row)
                if len(picks) == share:
                    cursor.close()
                    return picks
    if read < window:
        return picks
    # Held keys filled the window: the keys that may start take turns, after
    # the last one served so, past the held ones (a walk of those, not of
    # every key: a key is held by its active jobs, or its empty bucket).
    gate.turns = True
    return _fair(gate, skip)


def _fair(gate: Gate, skip: str) -> list[Pick]:
    """A job of each key in turn after the cursor, round after round."""
    share = gate.share
    (cursor,) = gate.conn.execute(Q["key_cursor"], (gate.queue,)).fetchone() or (None,)
    turns: list[tuple[str, int, list[Pick]]] = []  # key, its places, its next jobs
    for key in gate.cycle(cursor, skip):
        n = gate.left_for(key)
        if n:
            first = gate.head(key, skip)
            if first:
                turns.append((key, n, first))
                if len(turns) == share:
                    break
    quota = math.ceil(share / len(turns)) if turns else 0
    while True:
        turns = [(k, n, js if len(js) >= min(n, quota) else gate.jobs(k, skip, min(n, quota)))
                 for k, n, js in turns]  # fmt: skip
        picks = [js[r] for r in range(quota) for _, _, js in turns if r < len(js)][:share]
        more = any(len(js) == quota < n for _, n, js in turns)
        if len(picks) == share or not more or quota >= share:
            return picks
        quota = share  # some keys ran out: the others fill their places


def key_counts(conn: sqlite3.Connection, queue: str, limit: int) -> list[KeyCount]:
    """The queue's keys with queued or active jobs, most first, then by key."""
    found: dict[str | None, list[int]] = {}
    for key, queued, active in conn.execute(Q["key_counts"], (queue,)):
        counts = found.setdefault(key or None, [0, 0])
        counts[0] += queued
        counts[1] += active
    rows = [KeyCount(k, q, a) for k, (q, a) in found.items()]
    rows.sort(key=lambda c: (-(c.queued + c.active), c.key is not None, c.key or ""))
    return rows[:limit]
