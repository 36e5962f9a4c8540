"""The PostgreSQL backend's URL: tenure's options, libpq's, and the schema's name.

A URL may name several hosts, as libpq reads them
(``postgresql://a:5432,b:5433/db``): each connection tries them in order and
keeps the first that answers as ``target_session_attrs`` asks. Every
connection tenure makes (its pool's, the liveness session, LISTEN, a
handler's ``transaction()``) is made from this one string, again after each
lost one, so workers follow a promoted standby. A URL of several hosts is
for failover, and gets defaults for it (``MULTI_HOST_DEFAULTS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.names import check_name
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, one_line, scrub
from tenure.errors import InvalidInput

URL_OPTIONS = {"schema", "max_payload", "pool_size"}
LIBPQ_OPTIONS = frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())
CONNECT_TIMEOUT = 5  # seconds; libpq's own default is to wait as long as TCP does
MAX_CONNECT_TIMEOUT = 3600
# The work pool's connections at most: an idle worker keeps one of them, a
# busy one uses both (with its liveness session: 2 and 3 connections).
POOL_SIZE = 2
MAX_POOL_SIZE = 1000
# Wake-ups are NOTIFY on the channel tenure.<schema>, an identifier: 63 bytes at most.
MAX_SCHEMA_LENGTH = 63 - len("tenure.")
# libpq's values; a wrong one would only fail at the first connection.
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
# libpq's options a URL of several hosts gets unless it says otherwise. tenure
# writes on every connection: a standby that answered first would refuse each
# write. A primary's host may vanish without closing its connections (power
# lost, cable cut): TCP alone waits minutes on each before its error; these
# give up on a connection whose data stays unacknowledged for 10 s, or that
# is idle and answers no probe for as long.
MULTI_HOST_DEFAULTS = {
    "target_session_attrs": "read-write",
    "tcp_user_timeout": "10000",  # milliseconds
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
}


@dataclass(frozen=True, slots=True)
class Options:
    """What a URL asks of the backend: libpq's connection string, and tenure's options."""

    conninfo: str
    schema: str
    max_payload: int
    pool_size: int


def parse(url: str) -> Options:
    """The options of ``postgresql://user[:password]@host[:port][,host2[:port2]…]/db?...``;
    InvalidInput for what tenure or libpq cannot read."""
    options = UrlOptions(url, "PostgreSQL", URL_OPTIONS | LIBPQ_OPTIONS)
    parts = urlsplit(url)  # UrlOptions refused what it cannot split
    # Built by hand: urlunsplit drops the "//" of a URL without a host before its
    # path (postgresql:///db?host=/run/postgresql), which libpq then cannot read.
    base = f"postgresql://{parts.netloc}{parts.path}"
    libpq = {k: v for k, v in options.values.items() if k not in URL_OPTIONS}
    libpq["connect_timeout"] = str(
        options.integer("connect_timeout", CONNECT_TIMEOUT, low=1, high=MAX_CONNECT_TIMEOUT)
    )
    hosts = _hosts(options, _fields(options, url, f"{base}?{_query(libpq)}"))
    if hosts > 1:
        libpq = MULTI_HOST_DEFAULTS | libpq
    return Options(
        f"{base}?{_query(libpq)}",
        schema=options.text("schema", "tenure"),
        max_payload=options.integer("max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD),
        pool_size=options.integer("pool_size", POOL_SIZE, low=1, high=MAX_POOL_SIZE),
    )


def _query(libpq: dict[str, str]) -> str:
    return urlencode(libpq, quote_via=quote)  # libpq reads "+" as itself, not a space


def _fields(options: UrlOptions, url: str, conninfo: str) -> dict[str, str]:
    """libpq's reading of ``conninfo``: what it cannot read fails here, not at connect."""
    try:
        return {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    except psycopg.Error as exc:
        raise InvalidInput(
            f"bad PostgreSQL URL {options.safe_url!r}: {one_line(scrub(str(exc), url))}"
        ) from None


def _hosts(options: UrlOptions, fields: dict[str, str]) -> int:
    """How many hosts the URL names; InvalidInput for none, for ports that do not
    match them, and for a ``target_session_attrs`` libpq would refuse at connect."""
    hosts = fields.get("host", "").split(",")
    addresses = fields.get("hostaddr", "").split(",")
    if not any(hosts) and not any(addresses):
        raise InvalidInput(
            f"PostgreSQL URL {options.safe_url!r} names no host: postgresql://user@host/db"
        )
    count = max(len(hosts), len(addresses))
    if "host" in fields and "hostaddr" in fields and len(hosts) != len(addresses):
        raise options.error("hostaddr", f"{len(addresses)} addresses for {len(hosts)} hosts")
    ports = fields.get("port", "").split(",")
    if len(ports) not in (1, count):
        raise options.error("port", f"{len(ports)} ports for {count} hosts (give 1 or {count})")
    for port in ports:
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise options.error("port", f"{port!r} is not a port number (1 to 65535)")
    attrs = fields.get("target_session_attrs")
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise options.error("target_session_attrs", f"must be one of {', '.join(SESSION_ATTRS)}")
    return count


def check_schema(schema: str) -> None:
    """InvalidInput unless ``schema`` can name tenure's schema and its channel."""
    check_name("schema", schema)
    if len(schema) > MAX_SCHEMA_LENGTH:
        raise InvalidInput(
            f"schema name {schema!r} is too long: at most {MAX_SCHEMA_LENGTH} characters "
            "(its wake-up channel, tenure.<schema>, is a PostgreSQL identifier)"
        )
