"""Retention on SQLite: the pruner deletes finished jobs past their queue's
``keep_*``, a few at a time (events' retention is the sweeper's: events.py)."""

from __future__ import annotations

from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core import retention
from tenure.core.clock import Clock

PRUNE_TX = 250  # jobs per transaction of a prune: a few ms (docs/benchmarks.md)


def prune(db: Database, clock: Clock, limit: int) -> int:
    """Delete up to ``limit`` finished jobs due for deletion; how many. In
    transactions of at most PRUNE_TX jobs: each holds the database's one write
    lock, which the workers' cycles wait for."""
    pruned = 0
    while pruned < limit:
        want = min(PRUNE_TX, limit - pruned)
        left = want
        now = clock.now()
        with db.tx() as conn:
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
