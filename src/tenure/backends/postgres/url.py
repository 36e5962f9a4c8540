"""The PostgreSQL backend's URL: tenure's options, libpq's, and the schema's name."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

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
POOL_SIZE = 8
MAX_POOL_SIZE = 1000
# Wake-ups are NOTIFY on the channel tenure.<schema>, an identifier: 63 bytes at most.
MAX_SCHEMA_LENGTH = 63 - len("tenure.")


@dataclass(frozen=True, slots=True)
class Options:
    """What a URL asks of the backend: libpq's connection string, and tenure's options."""

    conninfo: str
    schema: str
    max_payload: int
    pool_size: int


def parse(url: str) -> Options:
    """The options of ``postgresql://user[:password]@host[:port]/db?...``;
    InvalidInput for what tenure or libpq cannot read."""
    options = UrlOptions(url, "PostgreSQL", URL_OPTIONS | LIBPQ_OPTIONS)
    parts = urlsplit(url)
    if not parts.hostname and "host" not in options.values:
        raise InvalidInput(
            f"PostgreSQL URL {options.safe_url!r} names no host: postgresql://user@host/db"
        )
    libpq = {k: v for k, v in options.values.items() if k not in URL_OPTIONS}
    libpq["connect_timeout"] = str(
        options.integer("connect_timeout", CONNECT_TIMEOUT, low=1, high=MAX_CONNECT_TIMEOUT)
    )
    query = urlencode(libpq, quote_via=quote)  # libpq reads "+" as itself, not a space
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, query, ""))
    try:
        conninfo_to_dict(conninfo)  # what libpq cannot read fails here, not at connect
    except psycopg.Error as exc:
        raise InvalidInput(
            f"bad PostgreSQL URL {options.safe_url!r}: {one_line(scrub(str(exc), url))}"
        ) from None
    return Options(
        conninfo,
        schema=options.text("schema", "tenure"),
        max_payload=options.integer("max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD),
        pool_size=options.integer("pool_size", POOL_SIZE, low=1, high=MAX_POOL_SIZE),
    )


def check_schema(schema: str) -> None:
    """InvalidInput unless ``schema`` can name tenure's schema and its channel."""
    check_name("schema", schema)
    if len(schema) > MAX_SCHEMA_LENGTH:
        raise InvalidInput(
            f"schema name {schema!r} is too long: at most {MAX_SCHEMA_LENGTH} characters "
            "(its wake-up channel, tenure.<schema>, is a PostgreSQL identifier)"
        )
