"""Retention on Redis: the sweeper's prune, queue by queue (``prune.lua``).

A queue's finished jobs are indexed by when they finished (``retained:*``),
so a prune reads only the jobs it deletes. One prune deletes at most ``limit``
jobs in all, however many queues have some due: a pipeline first counts those
due in each queue (O(log n) each). Then each queue's share goes in script
calls of at most SCRIPT_MAX jobs, one round trip each: Redis serves nobody
else while a script runs, nor between the calls of one pipeline.
"""

from __future__ import annotations

from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Call, Runner
from tenure.config import QueuePolicy

DEFAULTS = QueuePolicy()
SCRIPT_MAX = 250  # jobs per prune.lua call: about a millisecond of Redis (docs/benchmarks.md)


def _keep(seconds: float | None) -> str:
    return "" if seconds is None else repr(float(seconds))


async def prune(runner: Runner, keys: Keys, limit: int) -> list[str]:
    """Delete up to ``limit`` finished jobs due for deletion; their ids."""
    members = await runner.command("SMEMBERS", keys.queues, repeatable=True)
    queues = sorted(m.decode() for m in members)
    defaults = [_keep(DEFAULTS.keep_completed), _keep(DEFAULTS.keep_dead)]
    shares = [(q, limit) for q in queues[:1]]
    if len(queues) > 1:
        counts = await runner.pipeline(
            [Call.script("prune", [keys.queue(q)], [0, *defaults]) for q in queues]
        )
        shares, left = [], limit
        for queue, (due, _) in zip(queues, counts, strict=True):
            if left and int(due):
                shares.append((queue, min(int(due), left)))
                left -= shares[-1][1]
    # Where one script may reach the fleet's id index too, it drops the ids
    # itself: nothing is left behind if this process dies just after.
    index = [] if runner.topology.cluster else [keys.jobs]
    gone: list[str] = []
    for queue, share in shares:
        wanted = share
        while wanted > 0:
            n = min(wanted, SCRIPT_MAX)
            _, ids = await runner.call("prune", [keys.queue(queue), *index], [n, *defaults])
            gone += [i.decode() for i in ids]
            wanted = wanted - n if len(ids) == n else 0  # fewer: none due is left
    if runner.topology.cluster and gone:
        await runner.command("HDEL", keys.jobs, *gone)
    return gone
