"""The seam between the backend and a Redis client: what ``scripts.Runner`` sends
commands through.

Two transports: redis-py's client (:class:`RedisPyTransport`, a pool, or the
cluster client) and the lane (``lane.py``, tenure's own protocol client: one
connection, for every call on a standalone Redis, wrapped in :class:`Parsed`).
Both reply alike, error replies as redis-py's exception classes and other
replies as redis-py's client parses them, so the backend does not know which
one it has; ``topology.py`` chooses when the backend opens (URL option
``transport``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

Command = tuple[str | bytes | int | float, ...]  # as scripts.Call.args


class Transport(Protocol):
    """Runs commands on Redis, one round trip per pipeline, never twice."""

    @property
    def ordered(self) -> bool:
        """Whether pipelines sent while others await their replies run in the
        order they were sent (one connection), so a caller may overlap them."""
        ...

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """The commands' replies in order, an error reply as its exception
        (redis-py's class); redis-py's ConnectionError or TimeoutError when the
        connection is lost or a reply is late: the commands may have run."""
        ...

    async def close(self) -> None:
        """Drop what the transport holds; later calls fail."""
        ...


class RedisPyTransport:
    """Commands through redis-py's public client (a pool, or the cluster client,
    which routes each command to the node of its keys): a :class:`Transport`
    everywhere, slower per call than the lane."""

    # On a pool, a pipeline sent while another awaits its replies may take
    # another connection and run first.
    ordered = False

    def __init__(self, client: Redis | RedisCluster) -> None:
        self.client = client

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        if len(commands) == 1:
            try:
                return [await self.client.execute_command(*commands[0], **options(commands[0]))]
            except redis_errors.ResponseError as exc:
                return [exc]
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command, **options(command))
            return list(await pipe.execute(raise_on_error=False))

    async def close(self) -> None:
        """Nothing: the client is the topology's, which closes it."""


def options(command: Command) -> dict[str, Any]:
    """What redis-py's parser of a reply needs to know of the command that
    redis-py's own methods tell it: ``SET … GET`` replies with the old value,
    which its parser of ``SET`` replies otherwise turns into a boolean."""
    if str(command[0]).upper() == "SET" and "GET" in command[3:]:
        return {"get": True}
    return {}


@functools.cache
def resp2_parsers() -> Mapping[str, Callable[..., Any]]:
    """redis-py's parsers of RESP2 replies (the lane's protocol), by command
    name, as its client applies them: a client's public ``response_callbacks``
    (the client never connects)."""
    parsers: Mapping[str, Callable[..., Any]] = Redis(protocol=2).response_callbacks  # type: ignore[assignment]
    return parsers


class Parsed:
    """A lane whose replies are parsed as redis-py's client parses them (its
    ``response_callbacks``, by command name: ``INFO`` as a dict, ``TIME`` as a
    pair…), so that every call may take it, not only scripts. A command name of
    two words (``"CLIENT LIST"``) is sent as two arguments."""

    ordered = True

    def __init__(self, lane: Transport) -> None:
        self.lane = lane
        self.callbacks = resp2_parsers()

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        names = [str(c[0]).upper() for c in commands]
        sent = [
            (*n.split(), *c[1:]) if " " in n else c for n, c in zip(names, commands, strict=True)
        ]
        replies = await self.lane.pipeline(sent)
        for i, (name, reply) in enumerate(zip(names, replies, strict=True)):
            parse = self.callbacks.get(name)
            if parse is not None and not isinstance(reply, Exception):
                replies[i] = parse(reply, **options(commands[i]))
        return replies

    async def close(self) -> None:
        await self.lane.close()
