"""Redis URLs: ``redis://``, ``rediss://`` (TLS), ``unix://`` and Sentinel's.

``redis://[user[:password]@]host[:port][/db][?options]``, ``rediss://…`` for TLS
(``ssl_ca_certs``, ``ssl_certfile``… as redis-py takes them), or
``unix://[user[:password]@]/path/to/redis.sock?db=N``. Behind Redis Sentinel:
``redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/service[/db]``
(``rediss+sentinel://`` for TLS to the sentinels and the primary; see
``sentinel.py``). tenure's own options: ``prefix`` (of every key, default
``tenure``), ``max_payload`` (bytes of JSON), ``pool_size`` (connections),
``cluster`` (``yes``: the URL names a node of a Redis Cluster), ``transport``
(of calls: ``auto``, ``lane`` or ``redis-py``, see ``topology.py``; default
``$TENURE_REDIS_TRANSPORT``, else ``auto``), ``wait_replicas`` (enqueues and
completions wait until that many replicas have them: ``WAIT``) and
``wait_timeout`` (seconds, default 1); the others go to redis-py
(``socket_timeout``, ``socket_connect_timeout``, ``ssl_*``…), checked as
strictly as tenure's own (``core/urls.py``). Passwords, in the URL or as
``?password=`` or ``?sentinel_password=``, never appear in messages.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, to_bool

from tenure.backends.redis import sentinel
from tenure.backends.redis.keys import DEFAULT_PREFIX, Keys
from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, redacted
from tenure.errors import InvalidInput

SCHEMES = ("redis", "rediss", "unix", *sentinel.SCHEMES)
OUR_OPTIONS = {"prefix", "max_payload", "pool_size", "cluster", "transport", "wait_replicas",
               "wait_timeout", *sentinel.OPTIONS}  # fmt: skip
REDIS_OPTIONS = set(URL_QUERY_ARGUMENT_PARSERS) | {
    "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
    "ssl_password", "ssl_ciphers", "client_name", "username", "password",
}  # fmt: skip
DEFAULT_POOL_SIZE = 32
MAX_POOL_SIZE = 1000
MAX_DB = 2**31 - 1  # and the bound of redis-py's other integer options
MAX_SECONDS = 86_400.0  # of redis-py's timeouts
MAX_REPLICAS = 100  # of wait_replicas
DEFAULT_WAIT_TIMEOUT = 1.0
TRANSPORT_ENV = "TENURE_REDIS_TRANSPORT"  # the default of the URL option transport


class Transports(enum.Enum):
    """What carries the calls (``?transport=``)."""

    AUTO = "auto"  # the lane where the URL and this process allow one, else redis-py
    LANE = "lane"  # the lane, or an error saying why not
    REDIS_PY = "redis-py"  # redis-py's client: slower, for debugging or comparison


@dataclass(frozen=True, slots=True)
class Options:
    """What a tenure Redis URL says."""

    url: str  # as given
    redis_url: str  # for redis-py: without tenure's own options
    safe_url: str  # for messages: without the password
    keys: Keys
    max_payload: int = DEFAULT_MAX_PAYLOAD
    pool_size: int = DEFAULT_POOL_SIZE
    cluster: bool = False
    transport: Transports = Transports.AUTO
    sentinels: sentinel.Sentinels | None = None  # behind Sentinel: where they are
    wait_replicas: int = 0  # replicas an enqueue or completion waits for (WAIT)
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT

    @property
    def lane_reachable(self) -> bool:
        """Whether a lane can reach this Redis: one node, over TCP or a unix
        socket, not TLS."""
        return _lane_reaches(urlsplit(self.redis_url).scheme, self.cluster)


def parse(url: str) -> Options:
    """The options of a Redis URL; InvalidInput for a malformed one."""
    safe = redacted(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidInput(f"malformed Redis URL {safe!r}: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidInput(f"not a Redis URL: {safe!r}; schemes: {', '.join(SCHEMES)}")
    options = UrlOptions(url, "Redis", OUR_OPTIONS | REDIS_OPTIONS)
    sentinels = None
    if parts.scheme in sentinel.SCHEMES:
        sentinels, parts = sentinel.parse(parts, options)
    elif used := sorted(set(options.values) & sentinel.OPTIONS):
        raise options.error(used[0], "only a redis+sentinel:// URL takes it")
    _check_db(parts.path if parts.scheme != "unix" else "", options)
    cluster = options.flag("cluster", False)
    if cluster and parts.scheme == "unix":
        raise InvalidInput(f"a Redis Cluster is reached over TCP, not a unix socket: {safe!r}")
    if cluster and sentinels:
        raise InvalidInput(f"Sentinel watches one primary, not a Redis Cluster: {safe!r}")
    if cluster and "wait_replicas" in options.values:
        raise options.error("wait_replicas", "not on a Redis Cluster (WAIT is one node's)")
    transport = _transport(options, lane_possible=_lane_reaches(parts.scheme, cluster))
    return Options(
        url=url,
        redis_url=urlunsplit(parts._replace(query=urlencode(_for_redis_py(options)))),
        safe_url=safe,
        keys=Keys(options.text("prefix", DEFAULT_PREFIX)),
        max_payload=options.integer("max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD),
        pool_size=options.integer("pool_size", DEFAULT_POOL_SIZE, low=2, high=MAX_POOL_SIZE),
        cluster=cluster,
        transport=transport,
        sentinels=sentinels,
        wait_replicas=options.integer("wait_replicas", 0, low=0, high=MAX_REPLICAS),
        wait_timeout=options.number("wait_timeout", DEFAULT_WAIT_TIMEOUT, low=0.001,
                                    high=MAX_SECONDS),
    )  # fmt: skip


def _lane_reaches(scheme: str, cluster: bool) -> bool:
    return not cluster and scheme in ("redis", "unix")


def _transport(options: UrlOptions, *, lane_possible: bool) -> Transports:
    """The URL's ``transport``, else ``$TENURE_REDIS_TRANSPORT`` (to switch a
    whole fleet, or a test run, without editing URLs), else ``auto``."""
    given, where = options.values.get("transport"), "URL option transport"
    if given is None:
        given, where = os.environ.get(TRANSPORT_ENV) or "auto", f"${TRANSPORT_ENV}"
    try:
        transport = Transports(given.strip().lower())
    except ValueError:
        choices = "/".join(t.value for t in Transports)
        raise InvalidInput(
            f"bad {where}: must be one of {choices}, not {given!r}, for {options.safe_url!r}"
        ) from None
    if transport is Transports.LANE and not lane_possible:
        raise InvalidInput(
            f"bad {where}: the lane reaches one Redis without TLS, not {options.safe_url!r}"
        )
    return transport


def _check_db(path: str, options: UrlOptions) -> None:
    """The database number, in the path (``/2``) or as ``?db=2``: redis-py takes
    a path it cannot read as database 0, which would be someone else's keys."""
    db = path.removeprefix("/")
    if db and not (db.isascii() and db.isdigit() and int(db) <= MAX_DB):
        raise InvalidInput(
            f"the path of a Redis URL is a database number such as /0, not {path!r}, "
            f"in {options.safe_url!r}"
        )
    options.integer("db", 0, low=0, high=MAX_DB)


def _for_redis_py(options: UrlOptions) -> list[tuple[str, str]]:
    """The options redis-py reads, each checked as strictly as tenure's own: its
    booleans written as it reads them (it takes ``off`` or ``maybe`` as true)."""
    kept = []
    for name, given in options.values.items():
        parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
        if name in OUR_OPTIONS:
            continue
        if parser is to_bool:
            kept.append((name, "true" if options.flag(name, False) else "false"))
            continue
        if parser is int:
            options.integer(name, 0, low=0, high=MAX_DB)
        elif parser is float:
            options.number(name, 0, low=0, high=MAX_SECONDS)
        kept.append((name, given))
    return kept
