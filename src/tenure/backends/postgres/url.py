"""The PostgreSQL backend's URL: tenure's options, libpq's, and the schema's name.

A URL may name several hosts, as libpq reads them
(``postgresql://a:5432,b:5433/db``): each connection tries them in order and
keeps the first that answers as ``target_session_attrs`` asks. Every
connection tenure makes (its pool's, the liveness session, LISTEN, a
handler's ``transaction()``) is made from this one string, again after each
lost one, so workers follow a promoted standby. A URL of several hosts is
for failover, and gets defaults for it (``MULTI_HOST_DEFAULTS``).

Behind a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``),
the URL is the pooler's and ``liveness_url`` names PostgreSQL itself: the
sessions that must stay one server session (the liveness advisory locks,
LISTEN) connect there, every other statement goes through the pooler, on
connections that keep no session state (``Endpoints``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.names import check_name
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, one_line, scrub
from tenure.errors import InvalidInput

URL_OPTIONS = {"schema", "max_payload", "pool_size", "liveness_url", "pooler"}
# What sits at the URL's address: PostgreSQL itself, or a pooler handing each
# transaction to any of its server connections.
POOLERS = ("none", "transaction")
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
class Endpoints:
    """Where each connection of a backend goes, and how it is set up: the
    pool's (every verb; a transaction pooler's when ``pooled``) and the
    sessions' (liveness and LISTEN: PostgreSQL itself, one session each)."""

    pool: str
    session: str
    pooled: bool = False

    @classmethod
    def direct(cls, conninfo: str) -> Endpoints:
        return cls(conninfo, conninfo)

    def pool_options(self) -> dict[str, Any]:
        """psycopg's options for the pool's connections (and a handler's own).
        A transaction pooler hands each transaction to any server connection
        (PgBouncer 1.18 does not follow prepared statements): a statement
        prepared on one is missing on the next."""
        return {"prepare_threshold": None} if self.pooled else {}


@dataclass(frozen=True, slots=True)
class Options:
    """What a URL asks of the backend: libpq's connection strings, and tenure's options."""

    endpoints: Endpoints
    schema: str
    max_payload: int
    pool_size: int

    @property
    def conninfo(self) -> str:
        return self.endpoints.pool


def parse(url: str) -> Options:
    """The options of ``postgresql://user[:password]@host[:port][,host2[:port2]…]/db?...``;
    InvalidInput for what tenure or libpq cannot read."""
    options = UrlOptions(url, "PostgreSQL", URL_OPTIONS | LIBPQ_OPTIONS)
    return Options(
        _endpoints(options, url),
        schema=options.text("schema", "tenure"),
        max_payload=options.integer("max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD),
        pool_size=options.integer("pool_size", POOL_SIZE, low=1, high=MAX_POOL_SIZE),
    )


def _endpoints(options: UrlOptions, url: str) -> Endpoints:
    """The pool's and the sessions' connection strings: one, unless a pooler
    sits at the URL's address (``pooler=transaction``, which ``liveness_url``
    implies)."""
    conninfo = _conninfo(options, url)
    liveness = options.values.get("liveness_url")
    pooler = options.text("pooler", "none" if liveness is None else "transaction")
    if pooler not in POOLERS:
        raise options.error("pooler", f"must be one of {', '.join(POOLERS)}, not {pooler!r}")
    if liveness is None:
        if pooler != "none":
            raise options.error("pooler", "needs liveness_url=postgresql://... (PostgreSQL "
                                "itself, for the liveness locks and LISTEN)")  # fmt: skip
        return Endpoints.direct(conninfo)
    if pooler == "none":
        raise options.error("liveness_url", "is for a pooler in transaction mode: "
                            "drop it, or drop pooler=none")  # fmt: skip
    return Endpoints(conninfo, _session_conninfo(options, liveness), pooled=True)


def _session_conninfo(options: UrlOptions, liveness: str) -> str:
    """libpq's connection string for ``liveness_url``: PostgreSQL's own URL, with
    libpq's options only (tenure's are the main URL's)."""
    if urlsplit(liveness).scheme not in ("postgresql", "postgres"):
        raise options.error("liveness_url", "must be a postgresql:// URL (percent-encoded)")
    inner = UrlOptions(liveness, "PostgreSQL liveness_url", LIBPQ_OPTIONS)
    return _conninfo(inner, liveness)


def _conninfo(options: UrlOptions, url: str) -> str:
    """libpq's connection string for ``url``, its own options checked."""
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
    return f"{base}?{_query(libpq)}"


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
