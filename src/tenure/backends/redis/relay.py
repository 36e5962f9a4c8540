"""Workflows across hash slots: the relay of the outboxes.

A step's transition moves its edges in its own script; a dependent (or the
workflow's record) in another queue, hence maybe another hash slot, learns it
by a message that script left in its queue's ``outbox`` (``_flow.lua``). The
scripts that may leave one return the prefixes of the queues whose outbox got
one; :meth:`Relay.relay` then applies each message in its target's slot
(``apply.lua``, which may leave messages in turn) and only then deletes it.
Applying is idempotent and order-safe (per edge, the last version applied), so
a relay that dies midway, or two relays of one message (a worker's and the
sweeper's), change nothing more: the sweeper relays every outbox it finds not
empty, so a message left by a crash is applied within a sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import orjson

from tenure.backends.redis.keys import Keys
from tenure.backends.redis.scripts import Call, Runner
from tenure.errors import BackendUnavailable

RELAY_BATCH = 500  # messages read from one outbox per round trip; steps per apply call
RELAY_ROUNDS = 1000  # outboxes emptied per relay, at most: a cascade ends, this bounds a bug

log = logging.getLogger("tenure.redis")


class Relay:
    """Relays the messages of outboxes to their targets' slots."""

    def __init__(self, runner: Runner, keys: Keys) -> None:
        self.runner = runner
        self.keys = keys

    async def after(self, reply: Any) -> Any:
        """A flow-aware script's reply ``{reply, {prefixes}, {workflows
        deleted}}``: relay from those prefixes, then return the reply proper."""
        value, prefixes, forgotten = reply
        if forgotten:
            await self.forget(forgotten)
        if prefixes:
            await self.relay(prefixes)
        return value

    async def forget(self, workflow_ids: list[bytes]) -> None:
        """Drop pruned workflows from the fleet's map (their records are gone;
        an entry left by a failure here only costs its bytes)."""
        try:
            await self.runner.command("HDEL", self.keys.workflows, *workflow_ids)
        except BackendUnavailable as exc:
            log.warning("pruned workflows left in the fleet's map: %s", exc)

    async def relay(self, prefixes: Iterable[bytes | str]) -> None:
        """Empty these outboxes, and those their messages fill in turn. A failure
        is logged, not raised: the transition that sent the messages is stored,
        they with it, and the next sweep relays them."""
        todo = list(dict.fromkeys(p if isinstance(p, str) else p.decode() for p in prefixes))
        try:
            for _ in range(RELAY_ROUNDS):
                if not todo:
                    return
                prefix = todo.pop(0)
                more = await self._relay_once(prefix)
                todo += [p for p in more if p not in todo]
        except BackendUnavailable as exc:
            log.warning("workflow messages left for the sweeper to relay: %s", exc)

    async def _relay_once(self, prefix: str) -> list[str]:
        """Apply one batch of ``prefix``'s outbox; the prefixes to relay next
        (this one again while its outbox had a full batch)."""
        outbox = prefix + "outbox"
        messages = await self.runner.command("LRANGE", outbox, 0, RELAY_BATCH - 1)
        if not messages:
            return []
        replies = await self.runner.pipeline(
            [Call.script("apply", [target], batch) for target, batch in _batches(messages)]
        )
        await self.runner.call("outbox_drop", [prefix], messages)
        forgotten = [i for _, _, ids in replies for i in ids]
        if forgotten:
            await self.forget(forgotten)
        more = [p.decode() for _, relays, _ in replies for p in relays]
        return [*more, prefix] if len(messages) == RELAY_BATCH else more


def _batches(messages: list[bytes]) -> list[tuple[str, list[bytes]]]:
    """The messages by target slot, in apply.lua calls of at most RELAY_BATCH
    steps each (a 'starts' message releases many: it weighs as many)."""
    calls: list[tuple[str, list[bytes]]] = []
    weights: list[int] = []
    open_call: dict[str, int] = {}  # a target's call that takes more, by index
    for message in messages:
        decoded = orjson.loads(message)
        target, weight = decoded["p"], len(decoded.get("ids") or ()) or 1
        i = open_call.get(target)
        if i is None or weights[i] + weight > RELAY_BATCH:
            i = open_call[target] = len(calls)
            calls.append((target, []))
            weights.append(0)
        calls[i][1].append(message)
        weights[i] += weight
    return calls
