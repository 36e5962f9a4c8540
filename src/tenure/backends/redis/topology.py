"""Standalone Redis or Redis Cluster: how the backend reaches its keys.

Everything else in the backend is the same on both: every script call names the
keys of one queue (one hash slot), and the client routes it. What differs is
here: the client (a connection pool, or redis-py's cluster client), dedicated
connections (liveness, blocking pops) to the node that holds a given key, the
few commands that concern every node (``SCRIPT LOAD``, ``CLIENT LIST``), and
the transport of calls: on a standalone Redis, the lane (``lane.py``).

What a worker holds (docs/howto/backends.md): its liveness connection, its
blocking pop's, and the lane, which carries every other call: 3 clients. The
pool is used where there is no lane (TLS, Cluster, ``transport=redis-py``)
and for blocking reads of events (``tenure serve``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, TypeVar

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from tenure.backends.redis import lane, sentinel
from tenure.backends.redis.transport import Parsed, RedisPyTransport, Transport
from tenure.backends.redis.url import Options, Transports
from tenure.errors import BackendUnavailable

log = logging.getLogger("tenure.redis")

C = TypeVar("C", bound=AbstractConnection)

# A command is never sent twice behind our back: a claim whose reply was lost
# must not claim again. The verbs that may be repeated say so (scripts.Runner).
NO_RETRY = Retry(NoBackoff(), 0)
TIMEOUTS = {"socket_connect_timeout": 5.0, "socket_timeout": 30.0}


class Topology:
    """The client, the transport of calls (the lane, where there is one, else
    the client), and dedicated connections to the node of a key."""

    def __init__(self, options: Options) -> None:
        self.cluster = options.cluster
        # ?wait_replicas=: WAIT's arguments (replicas, milliseconds)
        self.wait = None
        if options.wait_replicas:
            self.wait = (options.wait_replicas, max(1, round(options.wait_timeout * 1000)))
        self.sentinels: Sentinel | None = None
        self.client: Redis | RedisCluster
        if options.cluster:
            self.client = RedisCluster.from_url(
                options.redis_url, retry=NO_RETRY, max_connections=options.pool_size, **TIMEOUTS
            )
            self._pool: ConnectionPool | None = None
        else:
            if options.sentinels is not None:
                self.sentinels, self._pool = sentinel.primary_pool(
                    options.sentinels, options.redis_url, options.pool_size,
                    retry=NO_RETRY, **TIMEOUTS,
                )  # fmt: skip
            else:
                self._pool = BlockingConnectionPool.from_url(
                    options.redis_url, max_connections=options.pool_size, timeout=30,
                    retry=NO_RETRY, **TIMEOUTS,
                )  # fmt: skip
            self._pool.connection_class = hiredis_packing(self._pool.connection_class)
            self.client = Redis(connection_pool=self._pool)
        self.redis_py: Transport = RedisPyTransport(self.client)
        self.transport: Transport = self._transport(options)

    def _transport(self, options: Options) -> Transport:
        """The lane where the URL allows one (a standalone Redis, not over TLS:
        on Cluster a call goes to its queue's node, which only redis-py's cluster
        client keeps track of) and this process can run one; else redis-py."""
        if options.transport is Transports.REDIS_PY or not options.lane_reachable:
            return self.redis_py
        if lane.UNAVAILABLE is not None:
            if options.transport is Transports.LANE:
                raise BackendUnavailable(
                    f"the URL asks for the lane (transport=lane) but {lane.UNAVAILABLE}; "
                    "install a redis-py tenure was tested with (see its pyproject), "
                    "or use transport=redis-py"
                )
            _fall_back(lane.UNAVAILABLE)
            return self.redis_py
        locate = None
        if self.sentinels is not None and options.sentinels is not None:
            locate = functools.partial(self.sentinels.discover_master, options.sentinels.service)
        return Parsed(lane.Lane(options.redis_url, locate=locate, **TIMEOUTS))

    async def open(self) -> None:
        if isinstance(self.client, RedisCluster):
            await self.client.initialize()
            for node in self.client.get_nodes():
                node.connection_class = hiredis_packing(node.connection_class)

    async def close(self) -> None:
        await self.transport.close()
        await self.client.aclose()
        if self._pool is not None:
            await self._pool.aclose()
        if self.sentinels is not None:
            await self.sentinels.aclose()

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
        [reply] = await self.transport.pipeline([command])
        if isinstance(reply, Exception):
            raise reply
        return [reply]


@functools.cache  # once per process and reason: each backend opened would repeat it
def _fall_back(reason: str) -> None:
    log.warning(
        "the Redis lane is off: %s. Calls go through redis-py's client "
        "instead: correct, but slower (docs/redis.md). Pin a tested redis-py, or set "
        "transport=redis-py in the URL to choose it knowingly.",
        reason,
    )


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
