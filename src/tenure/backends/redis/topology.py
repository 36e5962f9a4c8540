"""Standalone Redis or Redis Cluster: how the backend reaches its keys.

Everything else in the backend is the same on both: every script call names the
keys of one queue (one hash slot), and the client routes it. What differs is
here: the client (a connection pool, or redis-py's cluster client), dedicated
connections (liveness, blocking pops) to the node that holds a given key, the
few commands that concern every node (``SCRIPT LOAD``, ``CLIENT LIST``), and,
on a standalone Redis, the lane for hot calls (``lane.py``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from tenure.backends.redis.lane import Lane
from tenure.backends.redis.url import Options

C = TypeVar("C", bound=AbstractConnection)

# A command is never sent twice behind our back: a claim whose reply was lost
# must not claim again. The verbs that may be repeated say so (scripts.Runner).
NO_RETRY = Retry(NoBackoff(), 0)
TIMEOUTS = {"socket_connect_timeout": 5.0, "socket_timeout": 30.0}


class Topology:
    """The client, and dedicated connections to the node of a key."""

    def __init__(self, options: Options) -> None:
        self.cluster = options.cluster
        self.client: Redis | RedisCluster
        # For the hot calls (scripts.Runner, hot=True) of a standalone Redis, not
        # over TLS. On Cluster, a call goes to the node of its queue's hash slot,
        # which only redis-py's cluster client keeps track of.
        self.lane: Lane | None = None
        if options.cluster:
            self.client = RedisCluster.from_url(
                options.redis_url, retry=NO_RETRY, max_connections=options.pool_size, **TIMEOUTS
            )
            self._pool: BlockingConnectionPool | None = None
        else:
            self._pool = BlockingConnectionPool.from_url(
                options.redis_url, max_connections=options.pool_size, timeout=30,
                retry=NO_RETRY, **TIMEOUTS,
            )  # fmt: skip
            self._pool.connection_class = hiredis_packing(self._pool.connection_class)
            self.client = Redis(connection_pool=self._pool)
            if Lane.supports(options.redis_url):
                self.lane = Lane(options.redis_url, **TIMEOUTS)

    async def open(self) -> None:
        if isinstance(self.client, RedisCluster):
            await self.client.initialize()
            for node in self.client.get_nodes():
                node.connection_class = hiredis_packing(node.connection_class)

    async def close(self) -> None:
        if self.lane is not None:
            await self.lane.close()
        await self.client.aclose()
        if self._pool is not None:
            await self._pool.aclose()

    def connection(self, key: str, name: str | None = None) -> AbstractConnection:
        """A new connection of its own (not from a pool) to the node holding
        ``key``, named ``name`` when given."""
        cls: type[AbstractConnection]
        if isinstance(self.client, RedisCluster):
            node = self.client.get_node_from_key(key)
            if node is None:
                raise RedisError(f"no node of the cluster holds key {key}")
            cls, kwargs = node.connection_class, node.connection_kwargs
        else:
            assert self._pool is not None
            cls, kwargs = self._pool.connection_class, self._pool.connection_kwargs
        connection: AbstractConnection = cls(**{**kwargs, "client_name": name})
        return connection

    async def everywhere(self, *command: Any) -> list[Any]:
        """Run a command on every node (one reply per node)."""
        if isinstance(self.client, RedisCluster):
            replies = await self.client.execute_command(
                *command, target_nodes=RedisCluster.ALL_NODES
            )
            return list(replies.values()) if isinstance(replies, dict) else [replies]
        return [await self.client.execute_command(*command)]  # type: ignore[no-untyped-call]

    async def on_node_of(self, key: str, *command: Any) -> Any:
        """Run a command on the node holding ``key`` (e.g. CLIENT KILL of a
        connection made with :meth:`connection`)."""
        if isinstance(self.client, RedisCluster):
            node = self.client.get_node_from_key(key)
            return await self.client.execute_command(*command, target_nodes=node)
        return await self.client.execute_command(*command)  # type: ignore[no-untyped-call]


def hiredis_packing(cls: type[C]) -> type[C]:
    """``cls``, packing commands with hiredis's packer, written in C: redis-py's
    asyncio connections pack in Python, ten times slower (a bulk enqueue packs
    hundreds of thousands of arguments)."""
    try:
        from hiredis import pack_command
    except ImportError:  # pragma: no cover - hiredis missing, or older than 2.1
        return cls

    class Packing(cls):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            if isinstance(args[0], str) and " " in args[0]:  # "CLIENT LIST" as one word
                args = (*args[0].split(), *args[1:])
            return [pack_command(args)]

    Packing.__name__ = Packing.__qualname__ = f"HiredisPacking{cls.__name__}"
    return Packing
