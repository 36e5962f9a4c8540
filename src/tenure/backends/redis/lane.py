"""A lane: one connection of its own for the hot calls, without redis-py's plumbing.

A worker calls one script per cycle (complete what finished, claim what comes
next). Through redis-py, each call checks a connection out of the pool under a
timeout, makes sure it is connected, runs inside a retry wrapper and asyncio
timeouts, and parses the reply in Python: about 30% of a worker's main thread,
more than the socket write. A lane is a bare asyncio protocol on one TCP or
unix-socket connection: a call packs its commands (hiredis), writes them and
awaits one future; hiredis parses the replies, and since Redis answers in
order, several calls may be in flight at once.

Kept from redis-py: the URL (parsed by redis-py), ``AUTH``, ``SELECT`` and
``CLIENT SETNAME`` as the URL asks, ``socket_connect_timeout`` and
``socket_timeout``, and the exception classes (``NoScriptError``,
``BusyLoadingError``, ``ConnectionError``, ``TimeoutError``…), so that
``scripts.Runner`` treats a lane's failures as the pool's. Left out: TLS and
Redis Cluster (every call stays on redis-py, see ``topology.py``), RESP3
(scripts reply alike in both), and retries: a command is never sent twice,
because a claim whose reply was lost must not claim again.

Which exception class an error reply stands for is redis-py's own mapping,
``redis._parsers.BaseParser.parse_error``: private, so it may move or change in
any release. It is found and checked once, at import (:func:`parse_error_of`);
if it is gone or maps a reply the backend relies on differently, or hiredis is
missing, :data:`UNAVAILABLE` says why and the backend uses redis-py's client
instead (``topology.py``), rather than fail mid-run on a reply it cannot map.

A reply later than ``socket_timeout`` aborts the connection and fails every
call in flight (TimeoutError); a lost connection fails them too
(ConnectionError). The next call connects again.
"""

from __future__ import annotations

import asyncio
import importlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
from redis import exceptions as redis_errors
from redis.asyncio.connection import parse_url

from tenure.backends.redis.transport import Command

try:
    from hiredis import Reader, pack_command
except ImportError:  # pragma: no cover - redis-py without hiredis, or hiredis older than 2.1
    HIREDIS = False
else:
    HIREDIS = True

ParseError = Callable[[str], redis_errors.RedisError]
INCOMPLETE = object()  # what the reader returns until a whole reply has arrived
READONLY = redis_errors.ReadOnlyError

# Error replies whose class the backend acts on: NOSCRIPT reloads the scripts,
# LOADING (a ConnectionError) lets a repeatable call ride out a restart, a
# refused password fails the handshake, anything else is a ResponseError.
PROBES: tuple[tuple[str, type[redis_errors.RedisError]], ...] = (
    ("NOSCRIPT No matching script. Please use EVAL.", redis_errors.NoScriptError),
    ("LOADING Redis is loading the dataset in memory", redis_errors.BusyLoadingError),
    ("WRONGPASS invalid username-password pair", redis_errors.AuthenticationError),
    ("ERR unknown command 'NOPE'", redis_errors.ResponseError),
)


class LaneUnavailable(Exception):
    """This process cannot run a lane: what the redis-py or hiredis installed lacks."""


def parse_error_of(parsers: object) -> ParseError:
    """redis-py's mapping of an error reply to its exception, from ``parsers``
    (the module ``redis._parsers``), checked against :data:`PROBES`.
    LaneUnavailable, naming the redis-py version and what changed, if it is
    missing or maps one of them to another class."""
    where = f"redis-py {redis.__version__}"
    parse_error = getattr(getattr(parsers, "BaseParser", None), "parse_error", None)
    if not callable(parse_error):
        raise LaneUnavailable(f"{where} has no redis._parsers.BaseParser.parse_error")
    for reply, expected in PROBES:
        try:
            error = parse_error(reply)
        except Exception as exc:
            message = f"{where}: BaseParser.parse_error({reply!r}) raised {exc!r}"
            raise LaneUnavailable(message) from exc
        if type(error) is not expected:
            raise LaneUnavailable(
                f"{where}: BaseParser.parse_error maps {reply.split()[0]} to "
                f"{type(error).__name__}, not {expected.__name__}"
            )
    return parse_error  # type: ignore[no-any-return]


def _detect() -> tuple[ParseError | None, str | None]:
    if not HIREDIS:
        return None, "hiredis 2.1 or later is not installed"
    try:
        return parse_error_of(importlib.import_module("redis._parsers")), None
    except ImportError:
        return None, f"redis-py {redis.__version__} has no module redis._parsers"
    except LaneUnavailable as exc:
        return None, str(exc)


# Why this process cannot run a lane (None: it can), and the mapping it uses.
PARSE_ERROR, UNAVAILABLE = _detect()


class _Calls:
    """Commands written together, awaiting their replies."""

    __slots__ = ("deadline", "expected", "future", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], expected: int, deadline: float) -> None:
        self.future = future
        self.expected = expected
        self.deadline = deadline
        self.replies: list[Any] = []


class _Connection(asyncio.Protocol):
    """One connection: the calls in flight, oldest first, and the parser of their
    replies. Once broken (lost, timed out, closed) it is not used again."""

    def __init__(self, timeout: float, parse_error: ParseError) -> None:
        self.loop = asyncio.get_running_loop()
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self.reader = Reader(
            protocolError=redis_errors.InvalidResponse,
            replyError=parse_error,
            notEnoughData=INCOMPLETE,
        )
        self.in_flight: deque[_Calls] = deque()
        # One timer, not one per call: while calls are in flight it is armed for
        # the oldest one's deadline or earlier (see _check_deadline).
        self.timer: asyncio.TimerHandle | None = None
        self.broken = False
        self.gone: asyncio.Future[None] = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """Write the commands; the future gets their replies, error replies as values."""
        assert self.transport is not None
        calls = _Calls(self.loop.create_future(), len(commands), self.loop.time() + self.timeout)
        self.in_flight.append(calls)
        # hiredis's stub types its argument as a tuple of one
        packed = [pack_command(c) for c in commands]  # type: ignore[arg-type]
        self.transport.write(b"".join(packed))
        if self.timer is None:
            self.timer = self.loop.call_at(calls.deadline, self._check_deadline)
        return calls.future

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            reply = self.reader.gets()
            while reply is not INCOMPLETE:
                if not self.in_flight:
                    raise redis_errors.InvalidResponse(f"a reply nobody asked for: {reply!r}")
                calls = self.in_flight[0]
                calls.replies.append(reply)
                if len(calls.replies) == calls.expected:
                    self.in_flight.popleft()
                    if not calls.future.done():  # else its caller was cancelled
                        calls.future.set_result(calls.replies)
                reply = self.reader.gets()
        except redis_errors.InvalidResponse as exc:
            self.abort(redis_errors.ConnectionError, f"Protocol error from Redis: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(redis_errors.ConnectionError, f"Connection lost: {exc or 'closed by server'}")
        if not self.gone.done():
            self.gone.set_result(None)

    def _check_deadline(self) -> None:
        self.timer = None
        if not self.in_flight:
            return  # the calls it was armed for were answered; the next call arms it
        deadline = self.in_flight[0].deadline
        if self.loop.time() < deadline:
            self.timer = self.loop.call_at(deadline, self._check_deadline)
        else:
            self.abort(redis_errors.TimeoutError, f"no reply within {self.timeout} s")

    def fail(self, error: type[redis_errors.RedisError], message: str) -> None:
        """Fail every call in flight; the connection is broken for good."""
        self.broken = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.in_flight:
            calls = self.in_flight.popleft()
            if not calls.future.done():
                calls.future.set_exception(error(message))

    def abort(self, error: type[redis_errors.RedisError], message: str) -> None:
        """Fail every call in flight and drop the connection."""
        self.fail(error, message)
        if self.transport is not None:
            self.transport.abort()


class Lane:
    """One connection of its own for hot calls (see the module docstring): a
    ``transport.Transport``. It connects on its first call, and again on the
    first call after a loss. LaneUnavailable if this process cannot run one."""

    ordered = True  # one connection: Redis runs calls in the order they were written

    def __init__(
        self,
        redis_url: str,
        *,
        socket_connect_timeout: float,
        socket_timeout: float,
        locate: Callable[[], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        if PARSE_ERROR is None:
            raise LaneUnavailable(UNAVAILABLE)
        self.parse_error = PARSE_ERROR
        options: dict[str, Any] = {
            "socket_connect_timeout": socket_connect_timeout,
            "socket_timeout": socket_timeout,
            **parse_url(redis_url),  # the URL's own options win, as in redis-py's from_url
        }
        self.path: str | None = options.get("path")
        self.host: str = options.get("host", "localhost")
        self.port: int = options.get("port", 6379)
        self.connect_timeout = float(options["socket_connect_timeout"])
        self.timeout = float(options["socket_timeout"])
        self.handshake = _handshake(options)
        # Behind Sentinel: where the primary is now, asked at each connect.
        self.locate = locate
        self._connection: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._closed = False

    @property
    def in_flight(self) -> int:
        """How many calls await their replies."""
        return 0 if self._connection is None else len(self._connection.in_flight)

    async def call(self, *args: str | bytes | int | float) -> Any:
        """Run one command; an error reply is raised (redis-py's exception class)."""
        [reply] = await self.pipeline([args])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Run commands, written at once; their replies in order, an error reply
        as its exception. redis-py's ConnectionError or TimeoutError when the
        connection is lost or a reply is late: the commands may have run, and
        are not sent again."""
        connection = self._connection
        if connection is None or connection.broken:
            connection = await self._connect()
        replies = await connection.send(commands)
        if self.locate is not None and any(isinstance(r, READONLY) for r in replies):
            # a primary demoted by a failover: the next call asks where the new one is
            connection.abort(redis_errors.ConnectionError, "the primary became a replica")
        return replies

    async def close(self) -> None:
        """Drop the connection: calls in flight fail, and so do later ones."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.abort(redis_errors.ConnectionError, "the lane was closed")
            await connection.gone

    async def _connect(self) -> _Connection:
        async with self._connecting:  # calls that meet no connection wait for one
            if self._closed:
                raise redis_errors.ConnectionError("the lane was closed")
            if self._connection is None or self._connection.broken:
                connection = await self._open()
                if self._closed:  # while it connected
                    connection.abort(redis_errors.ConnectionError, "the lane was closed")
                    raise redis_errors.ConnectionError("the lane was closed")
                self._connection = connection
            return self._connection

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = self.host, self.port
        timeout, parse_error = self.timeout, self.parse_error
        try:
            async with asyncio.timeout(self.connect_timeout):
                if self.locate is not None:
                    host, port = await self.locate()
                if self.path is not None:
                    _, connection = await loop.create_unix_connection(
                        lambda: _Connection(timeout, parse_error), self.path
                    )
                else:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(timeout, parse_error), host, port
                    )
        except TimeoutError:
            where = self.path or f"{host}:{port}"
            raise redis_errors.TimeoutError(f"Timeout connecting to {where}") from None
        except OSError as exc:
            where = self.path or f"{host}:{port}"
            raise redis_errors.ConnectionError(f"Error connecting to {where}: {exc}") from exc
        try:
            replies = await connection.send(self.handshake) if self.handshake else []
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        except BaseException:
            connection.abort(redis_errors.ConnectionError, "the handshake failed")
            raise
        return connection


def _handshake(options: dict[str, Any]) -> list[Command]:
    """What redis-py sends on a new connection before any command, as the URL asks."""
    commands: list[Command] = []
    username, password = options.get("username"), options.get("password")
    if username:
        commands.append(("AUTH", username, password or ""))
    elif password:
        commands.append(("AUTH", password))
    if options.get("client_name"):
        commands.append(("CLIENT", "SETNAME", options["client_name"]))
    if options.get("db"):
        commands.append(("SELECT", options["db"]))
    return commands
