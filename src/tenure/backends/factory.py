"""Open a backend from a URL: ``sqlite:///path``, ``postgresql://…``, ``redis://…``."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from tenure.backends.base import Backend
from tenure.config import DEFAULT_URL
from tenure.errors import InvalidInput

SCHEMES = {
    "sqlite": "tenure.backends.sqlite",
}
PLANNED = ("postgresql", "postgres", "redis", "rediss", "unix")


def resolve_url(url: str | None) -> str:
    """``url``, else ``$TENURE_URL``, else the embedded SQLite default."""
    return url or os.environ.get("TENURE_URL") or DEFAULT_URL


def from_url(url: str | None = None) -> Backend:
    """Build (not open) the backend a URL names; InvalidInput for a bad URL."""
    url = resolve_url(url)
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(
            f"malformed backend URL {url!r}: expected scheme://…, "
            f"with scheme one of {', '.join(sorted(SCHEMES))}"
        )
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise InvalidInput(f"malformed backend URL {url!r}: {exc}") from None
    if scheme == "sqlite":
        from tenure.backends.sqlite import SQLiteBackend

        return SQLiteBackend.from_url(url)
    accepted = ", ".join(sorted(SCHEMES))
    if scheme in PLANNED:
        raise InvalidInput(
            f"the {scheme}:// backend is not available in this version of tenure; "
            f"accepted schemes: {accepted}"
        )
    raise InvalidInput(
        f"unknown backend scheme {scheme!r} in {url!r}; accepted schemes: {accepted}"
    )
