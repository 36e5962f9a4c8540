"""The cycle on Redis: completions and the next claim in one script call, and the
lease holder's other fence-checked writes (complete, fail, release, progress).

On a standalone Redis the cycle is one call of ``cycle.lua`` over the keys of
every queue it touches, through the lane where there is one. On Redis Cluster a
script touches one slot: ``complete.lua`` per queue, and ``claim.lua`` per queue
after a ``peek.lua`` of each that shares the claim out, in one pipeline.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import orjson

from tenure.backends.base import LeaseRef
from tenure.backends.checks import claim_limit
from tenure.backends.redis import codec
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.liveness import Liveness
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.scripts import OK, Call, Runner, check
from tenure.config import QueuePolicy
from tenure.core.events import failure_events
from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import Outcome
from tenure.job import Job

PROMOTE_MAX = 1000  # due scheduled jobs one claim promotes per queue
DEFAULTS = QueuePolicy()

Item = tuple[str, int, bytes]  # a completion: job id, fence, result (JSON)


class Claiming:
    """The lease holder's verbs of the Redis backend: the cycle and the settles."""

    def __init__(
        self, runner: Runner, keys: Keys, index: Index, liveness: Liveness, relay: Relay
    ) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.liveness = liveness
        self.relay = relay

    async def complete_and_claim(
        self,
        items: Sequence[Item],
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        *,
        skip_tasks: Collection[str] = (),
    ) -> tuple[set[LeaseRef], list[Job]]:
        """One script (cycle.lua) for the completions and the claim; on Redis
        Cluster, one script per queue and the claim, in one pipeline."""
        limit = claim_limit(queues, limit)
        lost: set[LeaseRef] = set()
        batches: dict[str, list[Item]] = {}
        if items:
            queue_of = await self.index.queues_of({job_id for job_id, _, _ in items})
            lost = {(job_id, fence) for job_id, fence, _ in items if job_id not in queue_of}
            for item in items:
                if item[0] in queue_of:
                    batches.setdefault(queue_of[item[0]], []).append(item)
        if limit and self.liveness.seems_lost(worker_id):
            # Claimed under an identity the fleet already takes for dead, a job
            # would be recovered from under us: the next heartbeat registers us again.
            # (Checked after the round trip above, which may have spanned a restart.)
            limit = 0
        queues = list(dict.fromkeys(queues)) if limit else []
        if not batches and not queues:
            return lost, []
        skip = orjson.dumps(list(skip_tasks)).decode() if skip_tasks else ""
        claim: list[str | int] = [
            worker_id, limit, repr(DEFAULTS.lease_ttl), DEFAULTS.delivery, PROMOTE_MAX, skip
        ]  # fmt: skip
        if self.runner.topology.cluster:
            statuses, claimed, relays = await self._cycle_on_cluster(batches, queues, claim)
        else:
            keys = [self.keys.queue(q) for q in (*queues, *batches)]
            args: list[str | int | bytes] = [*claim, len(queues)]
            for batch in batches.values():
                args += [len(batch), *(a for item in batch for a in item)]
            claimed, statuses, relays = await self.runner.call("cycle", keys, args)
        if relays:  # a workflow's steps completed: their dependents in other slots learn it
            await self.relay.relay(relays)
        for batch, codes in zip(batches.values(), statuses, strict=True):
            lost |= {(i, f) for (i, f, _), code in zip(batch, codes, strict=True) if code != OK}
        jobs = [codec.job_of_values(values) for values in claimed]
        if self.runner.topology.cluster and len(queues) > 1:  # claimed queue by queue: in line
            jobs.sort(key=lambda j: (-j.priority, j.run_at, j.created_at, j.id))
        return lost, self.index.known(jobs)

    async def _cycle_on_cluster(
        self, batches: dict[str, list[Item]], queues: list[str], claim: list[str | int]
    ) -> tuple[list[Any], list[Any], list[Any]]:
        """complete.lua per queue and claim.lua per queue (each in its hash slot)."""
        calls = [
            Call.script("complete", [self.keys.queue(q)], [a for item in batch for a in item])
            for q, batch in batches.items()
        ]
        if queues:
            shares = {q: int(claim[1]) for q in queues}
            if len(shares) > 1:
                shares = await self._shares(queues, int(claim[1]), str(claim[5]))
            calls += [
                Call.script("claim", [self.keys.queue(q)], [claim[0], n, *claim[2:]])
                for q, n in shares.items() if n > 0
            ]  # fmt: skip
        replies = await self.runner.pipeline(calls)
        completed = replies[: len(batches)]
        claimed = [flat for r in replies[len(batches) :] for flat in r]
        return [c for c, _, _ in completed], claimed, [p for _, ps, _ in completed for p in ps]

    async def _shares(self, queues: list[str], limit: int, skip: str) -> dict[str, int]:
        """How many jobs to claim from each queue so that the batch is the best
        ``limit`` across them (Cluster: a peek per queue, then a claim per queue;
        a job another worker takes in between leaves this batch short)."""
        calls = [Call.script("peek", [self.keys.queue(q)], [limit, PROMOTE_MAX, skip])
                 for q in queues]  # fmt: skip
        candidates = []
        for queue, reply in zip(queues, await self.runner.pipeline(calls), strict=True):
            candidates += [(float(reply[i + 1]), reply[i], queue) for i in range(0, len(reply), 2)]
        shares = dict.fromkeys(queues, 0)
        for _, _, queue in sorted(candidates)[:limit]:
            shares[queue] += 1
        return shares

    async def _settle(
        self, script: str, job_id: str, fence: int, *args: str | bytes, ends: bool = True
    ) -> None:
        """Run one fence-checked script on a job; LeaseLost or JobNotFound if refused.
        A script that ``ends`` the attempt replies with the outboxes to relay too."""
        queue = await self.index.queue_of(job_id)
        keys, argv = [self.keys.queue(queue)], [job_id, fence, *args]
        code = await self.runner.call(script, keys, argv, repeatable=not ends)
        if ends:
            code = await self.relay.after(code)
        check(code, job_id, fence)

    async def progress(self, job_id: str, fence: int, payload: bytes) -> None:
        await self._settle("progress", job_id, fence, payload, ends=False)

    async def complete(self, job_id: str, fence: int, payload: bytes) -> None:
        queue = await self.index.queue_of(job_id)
        [code] = await self.relay.after(
            await self.runner.call("complete", [self.keys.queue(queue)], [job_id, fence, payload])
        )
        check(code, job_id, fence)

    async def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        reason = decision.dead_reason.value if decision.dead_reason else ""
        await self._settle(
            "fail", job_id, fence, Outcome(outcome).value, "" if error is None else "=" + error,
            decision.state.value, repr(float(decision.delay)), reason,
            "1" if decision.stall else "0",
            orjson.dumps(failure_events(outcome, decision, rescued=False)),
            orjson.dumps(failure_events(outcome, CANCELLED, rescued=False)),
        )  # fmt: skip

    async def release(self, job_id: str, fence: int) -> None:
        await self._settle("release", job_id, fence)
