"""Parsing a ``sqlite://`` URL: the file it names and the backend's options."""

from __future__ import annotations

from typing import TypedDict
from urllib.parse import unquote, urlsplit

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.urls import MAX_PAYLOAD, UrlOptions, redacted
from tenure.errors import InvalidInput

URL_OPTIONS = {"adopt", "durable", "busy_timeout", "max_payload"}
MAX_BUSY_MS = 3_600_000


class Options(TypedDict):
    """The backend's keyword arguments a URL's query gives."""

    durable: bool
    busy_timeout: float
    max_payload: int
    adopt: bool


def path_of_url(url: str) -> str:
    """The file a ``sqlite://`` URL names (or ``:memory:``); InvalidInput if none."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidInput(
            f"malformed SQLite URL {redacted(url)!r}: use sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path:
        raise InvalidInput(f"SQLite URL {url!r} names no file: use sqlite:///tenure.db")
    return path


def options_of_url(url: str) -> Options:
    """The options in the URL's query: ``durable`` (a boolean: fsync every
    commit), ``busy_timeout`` (ms, 0 to 1 hour; returned in seconds),
    ``max_payload`` (bytes of JSON) and ``adopt`` (a boolean: add tenure's
    tables to a database another program's tables are in)."""
    options = UrlOptions(url, "SQLite", URL_OPTIONS)
    return Options(
        durable=options.flag("durable", False),
        busy_timeout=options.number("busy_timeout", 5000, low=0, high=MAX_BUSY_MS) / 1000,
        max_payload=options.integer("max_payload", DEFAULT_MAX_PAYLOAD, low=1, high=MAX_PAYLOAD),
        adopt=options.flag("adopt", False),
    )
