"""Open a backend from a URL: ``sqlite:///path``, ``postgresql://…``, ``redis://…``."""

from __future__ import annotations

import importlib
import importlib.util
import os
from urllib.parse import urlsplit

from tenure.backends.base import Backend
from tenure.config import DEFAULT_URL
from tenure.core.urls import redacted
from tenure.errors import InvalidInput

# backend kind -> (URL schemes, module, class)
KINDS = {
    "sqlite": (("sqlite",), "tenure.backends.sqlite", "SQLiteBackend"),
    "postgres": (("postgresql", "postgres"), "tenure.backends.postgres", "PostgresBackend"),
    "redis": (
        ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel"),
        "tenure.backends.redis",
        "RedisBackend",
    ),
}


def available_kinds() -> list[str]:
    """The backend kinds this installation of tenure has."""
    return [kind for kind, (_, module, _) in KINDS.items() if importlib.util.find_spec(module)]


def _schemes() -> dict[str, str]:
    return {scheme: kind for kind in available_kinds() for scheme in KINDS[kind][0]}


def resolve_url(url: str | None) -> str:
    """``url``, else ``$TENURE_URL``, else the embedded SQLite default."""
    return url or os.environ.get("TENURE_URL") or DEFAULT_URL


def from_url(url: str | None = None, *, read_only: bool = False) -> Backend:
    """Build (not open) the backend a URL names; InvalidInput for a bad URL.
    ``read_only``: for a reader, which must not create, migrate or convert a
    SQLite file (servers' backends take no such mode)."""
    url = resolve_url(url)
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(
            f"malformed backend URL {_shown(url)}: expected scheme://…, "
            f"with scheme one of {', '.join(_schemes())}"
        )
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise InvalidInput(f"malformed backend URL {redacted(url)!r}: {exc}") from None
    schemes = _schemes()
    accepted = ", ".join(schemes)
    if scheme not in schemes and any(scheme in k[0] for k in KINDS.values()):
        raise InvalidInput(
            f"the {scheme}:// backend is not available in this version of tenure; "
            f"accepted schemes: {accepted}"
        )
    if scheme not in schemes:
        raise InvalidInput(
            f"unknown backend scheme {scheme!r} in {redacted(url)!r}; accepted schemes: {accepted}"
        )
    _, module, name = KINDS[schemes[scheme]]
    try:
        backend_class = getattr(importlib.import_module(module), name)
    except ImportError as exc:  # the backend's driver is an extra
        extra = schemes[scheme]
        raise InvalidInput(
            f"the {scheme}:// backend needs its driver: pip install 'tenure[{extra}]' ({exc})"
        ) from None
    if read_only and schemes[scheme] == "sqlite":
        reader: Backend = backend_class.from_url(url, read_only=True)
        return reader
    backend: Backend = backend_class.from_url(url)
    return backend


def check_shared(url: str) -> None:
    """Refuse storage that one connection alone can see: an App's is shared by
    the connection each event loop opens, and by its workers. An in-memory
    SQLite database is private to its connection: a worker would see none of
    the jobs, and process nothing."""
    if urlsplit(url).scheme.lower() != "sqlite":
        return
    from tenure.backends.sqlite.url import path_of_url  # only for a sqlite:// URL

    if path_of_url(url) == ":memory:":
        raise InvalidInput(
            "sqlite:///:memory: cannot hold an App's jobs: each connection to it is a "
            "database of its own, so a worker (or another event loop) would never see "
            "them; use a file, in tests a temporary one: sqlite:///{tmp_path}/tenure.db"
        )


def _shown(value: object) -> str:
    """What is not a URL, for a message: as given, unless it may hold a password
    (a libpq ``key=value`` string, say)."""
    if isinstance(value, str) and ("@" in value or "password" in value.lower()):
        return "(not shown: it may hold a password)"
    return repr(value)
