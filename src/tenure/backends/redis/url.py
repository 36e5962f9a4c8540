"""Redis URLs: ``redis://``, ``rediss://`` (TLS) and ``unix://``, with credentials.

``redis://[user[:password]@]host[:port][/db][?options]``, ``rediss://…`` for TLS
(``ssl_ca_certs``, ``ssl_certfile``… as redis-py takes them), or
``unix://[user[:password]@]/path/to/redis.sock?db=N``. tenure's own options:
``prefix`` (of every key, default ``tenure``), ``max_payload`` (bytes of JSON),
``pool_size`` (connections) and ``cluster`` (``yes``: the URL names a node of a
Redis Cluster); the others go to redis-py (``socket_timeout``,
``socket_connect_timeout``, ``ssl_*``…). Passwords never appear in messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

from tenure.backends.redis.keys import DEFAULT_PREFIX, Keys
from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.errors import InvalidInput

SCHEMES = ("redis", "rediss", "unix")
OUR_OPTIONS = {"prefix", "max_payload", "pool_size", "cluster"}
YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
REDIS_OPTIONS = set(URL_QUERY_ARGUMENT_PARSERS) | {
    "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
    "ssl_password", "ssl_ciphers", "client_name", "username", "password",
}  # fmt: skip
DEFAULT_POOL_SIZE = 32


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


def parse(url: str) -> Options:
    """The options of a Redis URL; InvalidInput for a malformed one."""
    safe = redacted(url)
    try:
        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise InvalidInput(f"malformed Redis URL {safe!r}: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidInput(f"not a Redis URL: {safe!r}; schemes: {', '.join(SCHEMES)}")
    unknown = sorted(set(options) - OUR_OPTIONS - REDIS_OPTIONS)
    if unknown:
        raise InvalidInput(
            f"unknown Redis URL option(s) {', '.join(unknown)}; accepted: "
            f"{', '.join(sorted(OUR_OPTIONS | REDIS_OPTIONS))}"
        )
    try:
        max_payload = int(options.get("max_payload", DEFAULT_MAX_PAYLOAD))
        pool_size = int(options.get("pool_size", DEFAULT_POOL_SIZE))
    except ValueError as exc:
        raise InvalidInput(f"bad Redis URL option in {safe!r}: {exc}") from None
    if max_payload < 1 or pool_size < 2:
        raise InvalidInput(f"max_payload must be >= 1 and pool_size >= 2 in {safe!r}")
    cluster = options.get("cluster", "no").lower()
    if cluster not in YES + NO:
        raise InvalidInput(f"cluster must be yes or no in {safe!r}")
    if cluster in YES and parts.scheme == "unix":
        raise InvalidInput(f"a Redis Cluster is reached over TCP, not a unix socket: {safe!r}")
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k not in OUR_OPTIONS]  # fmt: skip
    return Options(
        url=url,
        redis_url=urlunsplit(parts._replace(query=urlencode(kept))),
        safe_url=safe,
        keys=Keys(options.get("prefix", DEFAULT_PREFIX)),
        max_payload=max_payload,
        pool_size=pool_size,
        cluster=cluster in YES,
    )


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<malformed URL>"
