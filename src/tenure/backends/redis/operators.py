"""The operator's verbs on Redis: cancel, retry and purge the dead, delete a
queue, read jobs (get, match, list), count them, and the queues' policies.

Each is a script on one queue's keys (its hash slot), or a plain command on the
fleet's keys. Verbs that could hold Redis for long (delete_queue, dead_counts,
match_ids) go a bounded piece per round trip.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from tenure.backends.base import Page
from tenure.backends.checks import (
    bad_cursor,
    check_cursor,
    cursor_seq,
    not_cancellable,
    prefix_range,
    queue_busy,
)
from tenure.backends.redis import codec
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys, glob_escaped
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.scripts import INVALID_TRANSITION, Call, Runner, check
from tenure.config import QueuePolicy
from tenure.core.limits import KeyCount
from tenure.core.names import NAME_PATTERN
from tenure.core.states import DeadReason, State
from tenure.core.workflows import ENDED, WorkflowState
from tenure.errors import JobNotFound
from tenure.job import Job

DELETE_PIECE = 1000  # jobs one delete_queue call deletes: bounds how long it holds Redis
DEAD_COUNT_PIECE = 5000  # dead jobs one dead_counts call looks at: bounds how long it holds Redis
MATCH_PIECE = 5000  # ids one HSCAN of match_ids looks at: bounds how long it holds Redis
DEFAULTS = QueuePolicy()


class Operators:
    """The operator's verbs of the Redis backend, given arguments already checked."""

    def __init__(self, runner: Runner, keys: Keys, index: Index, relay: Relay) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.relay = relay

    async def cancel(self, job_id: str) -> Job:
        queue = await self.index.queue_of(job_id)
        reply = await self.runner.call("cancel", [self.keys.queue(queue)], [job_id])
        code, *rest = await self.relay.after(reply)
        if code == INVALID_TRANSITION:
            raise not_cancellable(await self.get(job_id))
        check(code, job_id)
        return codec.job(*rest)

    async def retry_dead(self, queue: str, ids: Sequence[str] | None, retried_by: str) -> int:
        args = [retried_by, *(ids or [])]
        reply = await self.runner.call("retry_dead", [self.keys.queue(queue)], args)
        return int(await self.relay.after(reply))

    async def purge_dead(self, queue: str, ids: Sequence[str] | None) -> int:
        reply = await self.runner.call("purge_dead", [self.keys.queue(queue)], ids or [])
        gone = await self.relay.after(reply)
        if gone:
            await self.runner.command("HDEL", self.keys.jobs, *gone)
            self.index.forget(gone)
        return len(gone)

    async def delete_queue(self, queue: str) -> int:
        """delete_queue.lua, a piece at a time, then the queue's name."""
        deleted = 0
        while True:
            code, left, *ids = await self.runner.call(
                "delete_queue", [self.keys.queue(queue)], [DELETE_PIECE]
            )
            if code == INVALID_TRANSITION:
                raise queue_busy(queue, int(left))
            if not ids:
                break
            await self.runner.command("HDEL", self.keys.jobs, *ids)
            self.index.forget(ids)
            deleted += len(ids)
        await self.runner.command("SREM", self.keys.queues, queue)
        return deleted

    async def get(self, job_id: str) -> Job:
        queue = await self.index.queue_of(job_id)
        keys = [self.keys.queue(queue)]
        flat, history = await self.runner.call("get", keys, [job_id], repeatable=True)
        if not flat:
            raise JobNotFound(f"no job with id {job_id!r}")
        return codec.job(flat, history)

    async def match_ids(self, prefix: str, limit: int) -> builtins.list[str]:
        if prefix_range(prefix) is None:
            return []
        pattern = glob_escaped(prefix) + "*"
        found: set[str] = set()
        cursor: bytes | int = 0
        while True:  # one bounded HSCAN a round trip, until the hash is done or limit is met
            cursor, pairs = await self.runner.command(
                "HSCAN", self.keys.jobs, cursor, "MATCH", pattern, "COUNT", MATCH_PIECE,
                repeatable=True,
            )  # fmt: skip
            names = pairs if isinstance(pairs, dict) else pairs[::2]  # as redis-py parses it
            found.update(i.decode() for i in names)
            if int(cursor) == 0 or len(found) >= limit:
                return sorted(found)[:limit]

    async def list(
        self, queue: str | None, state: State | None, limit: int, cursor: tuple[int, str] | None
    ) -> Page:
        queues = [queue] if queue is not None else await self.index.queues()
        calls = []
        for q in queues:
            # newest first by (seq, queue): below the cursor's seq, or at it in a lower queue
            bound = "+inf" if cursor is None else f"({cursor[0]}"
            if cursor is not None and q < cursor[1]:
                bound = str(cursor[0])
            args = [state.value if state else "", bound, limit + 1]
            calls.append(Call.script("list", [self.keys.queue(q)], args))
        rows = []
        replies = await self.runner.pipeline(calls, repeatable=True)
        for q, reply in zip(queues, replies, strict=True):
            rows += [(int(reply[i]), q, reply[i + 1]) for i in range(0, len(reply), 2)]
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
        jobs = self.index.known([codec.job(flat) for _, _, flat in rows[:limit]])
        last = rows[limit - 1] if len(rows) > limit else None
        return Page(jobs, None if last is None else f"{last[0]}:{last[1]}")

    async def counts(self, queue: str) -> dict[State, int]:
        states = builtins.list(State)
        names = [s.value for s in states]
        reply = await self.runner.call("counts", [self.keys.queue(queue)], names, repeatable=True)
        return {s: int(n) for s, n in zip(states, reply, strict=True)}

    async def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        counted: Counter[str] = Counter()
        after: str | None = ""
        while after is not None:
            reply = await self.runner.call(
                "dead_counts", [self.keys.queue(queue)], [after, DEAD_COUNT_PIECE], repeatable=True
            )
            for reason, n in zip(reply[1::2], reply[2::2], strict=True):
                counted[reason.decode()] += int(n)
            after = reply[0].decode() or None
        return {DeadReason(reason): n for reason, n in counted.items()}

    async def lag(self, queue: str) -> float:
        return float(await self.runner.call("lag", [self.keys.queue(queue)], [], repeatable=True))

    async def queues(self) -> builtins.list[str]:
        return await self.index.queues()

    async def workflow_counts(self) -> dict[WorkflowState, int]:
        """Summed over each home queue's count, which its scripts keep."""
        return await self._summed("wfcount", WorkflowState)

    async def workflow_outcomes(self) -> dict[WorkflowState, int]:
        """Summed over each home queue's count of ends (``_flow.lua``: wf_counted)."""
        return await self._summed("wfended", ENDED)

    async def _summed(self, name: str, states: Iterable[WorkflowState]) -> dict[WorkflowState, int]:
        """The hash ``name`` of each queue (state -> count), summed for ``states``."""
        counts = {s.value: 0 for s in states}
        queues = await self.index.queues()
        found = await self.runner.pipeline(
            [Call.command("HGETALL", self.keys.queue(q) + name) for q in queues],
            repeatable=True,
        )
        for by_state in found:
            for state, n in (by_state or {}).items():
                value = state.decode() if isinstance(state, bytes) else str(state)
                if value in counts:
                    counts[value] += int(n)
        return {WorkflowState(s): n for s, n in counts.items()}

    async def get_policy(self, queue: str) -> QueuePolicy:
        raw = await self.runner.command("GET", self.keys.policy(queue), repeatable=True)
        return DEFAULTS if raw is None else QueuePolicy.from_json(raw)

    async def set_policy(self, queue: str, policy: QueuePolicy) -> None:
        await self.runner.pipeline([
            Call.command("SADD", self.keys.queues, queue),
            Call.script("change_policy", [self.keys.queue(queue)],
                        ["", orjson.dumps(policy.to_dict()), "1"]),
        ], repeatable=True)  # fmt: skip

    async def key_counts(self, queue: str, limit: int) -> builtins.list[KeyCount]:
        reply = await self.runner.call("key_counts", [self.keys.queue(queue)], [limit],
                                       repeatable=True)  # fmt: skip
        unkeyed, rest = reply[:2], reply[2:]
        counts = [KeyCount(rest[i].decode(), int(rest[i + 1]), int(rest[i + 2]))
                  for i in range(0, len(rest), 3)]  # fmt: skip
        if any(unkeyed):
            counts.append(KeyCount(None, int(unkeyed[0]), int(unkeyed[1])))
        counts.sort(key=lambda c: (-c.queued - c.active, c.key is not None, c.key or ""))
        return counts[:limit]

    async def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        """Read, merge, then store only if nothing changed meanwhile (a compare
        and set in change_policy.lua), else again."""
        key = self.keys.policy(queue)
        while True:
            stored = await self.runner.command("GET", key, repeatable=True)
            policy = QueuePolicy.from_json(stored).replace(**changes)  # InvalidInput: no change
            new = orjson.dumps(policy.to_dict())
            prefix = [self.keys.queue(queue)]
            if await self.runner.call("change_policy", prefix, [stored or b"", new],
                                      repeatable=True):  # fmt: skip
                await self.runner.command("SADD", self.keys.queues, queue, repeatable=True)
                return policy


def parse_cursor(after: str | None) -> tuple[int, str] | None:
    """A cursor of this backend's ``list``: ``seq:queue``; InvalidInput if bad."""
    if (after := check_cursor(after)) is None:
        return None
    seq, _, queue = after.partition(":")
    if NAME_PATTERN.fullmatch(queue) is None:
        raise bad_cursor(after)
    return cursor_seq(seq), queue
