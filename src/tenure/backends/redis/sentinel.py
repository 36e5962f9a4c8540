"""Redis behind Sentinel: the URL's sentinels, and the primary they name.

``redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/service[/db][?options]``
lists the sentinels (port 26379 unless given) and the service they watch
(``sentinel monitor <service> …``); ``rediss+sentinel://`` speaks TLS to both the
sentinels and the primary. The credentials, ``db`` and every other option are
the primary's, as in a ``redis://`` URL; sentinels that ask for a password of
their own get ``sentinel_password`` (and ``sentinel_username``).

Every connection the backend opens (the lane, the pool's, liveness, blocking
pops) asks a sentinel where the primary is as it connects: after a failover,
the first connection made again reaches the promoted replica. A connection
still open to a primary that was demoted meets ``READONLY`` and is dropped
(``lane.py``, redis-py's pool), so that the next one asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, unquote

from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from tenure.core.urls import UrlOptions
from tenure.errors import InvalidInput

# A Sentinel URL's scheme -> the scheme of its primary's
SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
OPTIONS = frozenset({"sentinel_username", "sentinel_password"})
DEFAULT_PORT = 26379


@dataclass(frozen=True, slots=True)
class Sentinels:
    """The sentinels a URL lists, the service they watch, and how to reach them."""

    addresses: tuple[tuple[str, int], ...]
    service: str
    username: str | None = None
    password: str | None = None
    tls: bool = False

    def kwargs(self, primary: dict[str, Any]) -> dict[str, Any]:
        """redis-py's connection arguments for a sentinel, given the primary's:
        the same timeouts and TLS settings, the sentinels' own credentials."""
        shared = {k: v for k, v in primary.items() if k.startswith(("socket_", "ssl_"))}
        if self.tls:
            shared["ssl"] = True
        return {**shared, "username": self.username, "password": self.password}


def parse(parts: SplitResult, options: UrlOptions) -> tuple[Sentinels, SplitResult]:
    """The sentinels of a Sentinel URL, and the URL of its primary as
    ``redis://`` (or ``rediss://``) with the host ``primary``, which the
    backend never dials: it asks the sentinels instead."""
    safe = options.safe_url
    userinfo, at, hosts = parts.netloc.rpartition("@")
    addresses = tuple(_address(h, safe) for h in hosts.split(","))
    _, *path = parts.path.split("/")
    service = unquote(path[0]) if path else ""
    if not service.strip() or len(path) > 2:
        raise InvalidInput(
            "a Sentinel URL names the service after its sentinels, and then the "
            "database: redis+sentinel://host:26379,host2:26379/mymaster/0, "
            f"not {safe!r}"
        )
    sentinels = Sentinels(
        addresses=addresses,
        service=service,
        username=options.values.get("sentinel_username") or None,
        password=options.values.get("sentinel_password") or None,
        tls=parts.scheme == "rediss+sentinel",
    )
    db = f"/{path[1]}" if len(path) > 1 else ""
    primary = parts._replace(scheme=SCHEMES[parts.scheme], netloc=f"{userinfo}{at}primary", path=db)
    return sentinels, primary


def _address(text: str, safe: str) -> tuple[str, int]:
    """``host[:port]`` or ``[v6]:port`` of one sentinel."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        good, port = rest == "" or rest.startswith(":"), rest[1:]
    else:
        host, _, port = text.partition(":")
        good = ":" not in port  # an IPv6 address goes in brackets
    if not (good and host.strip()):
        raise InvalidInput(f"a sentinel's address is host[:port], not {text!r}, in {safe!r}")
    if not port:
        return host, DEFAULT_PORT
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise InvalidInput(f"a sentinel's port is from 1 to 65535, not {port!r}, in {safe!r}")
    return host, int(port)


def primary_pool(
    sentinels: Sentinels, redis_url: str, max_connections: int, **defaults: Any
) -> tuple[Sentinel, SentinelConnectionPool]:
    """The sentinels' client, and a pool of connections to the primary they name
    (each asks them as it connects). ``redis_url``: the primary's, as
    :func:`parse` made it; its options win over ``defaults``, as in redis-py's
    ``from_url``."""
    primary: dict[str, Any] = {**defaults, **parse_url(redis_url)}
    primary.pop("host", None)
    primary.pop("port", None)
    if primary.pop("connection_class", None) is not None:  # rediss: TLS
        primary["ssl"] = True
    manager = Sentinel(  # type: ignore[no-untyped-call]
        list(sentinels.addresses), sentinel_kwargs=sentinels.kwargs(primary)
    )
    pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
        sentinels.service, manager, max_connections=max_connections, **primary
    )
    return manager, pool
