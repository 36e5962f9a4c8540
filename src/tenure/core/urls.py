"""Backend URLs: their options read strictly, their secrets kept out of every message.

Every backend's ``from_url`` reads its query options through :class:`UrlOptions`,
so that a URL means one thing on every backend: a boolean is one of
``1 0 true false yes no on off`` (any case) and nothing else, a number is finite
and within its documented bounds, an option given twice or not known is refused
with the list of known ones. A URL is read before anything is opened, so a bad
one creates nothing.

A URL that reaches a log line, an error or a table goes through
:func:`redacted` first; a driver's error text, which may quote its connection
string, goes through :func:`scrub`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from tenure.errors import InvalidInput

YES = frozenset({"1", "true", "yes", "on"})
NO = frozenset({"0", "false", "no", "off"})
MASK = "***"
INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
# The largest max_payload a URL may set: the largest string Redis stores.
MAX_PAYLOAD = 512 * 1024 * 1024
# Query options that carry a secret, on any backend: libpq's, redis-py's, tenure's.
SECRET_OPTIONS = frozenset(
    {"password", "sslpassword", "ssl_password", "oauth_client_secret", "sentinel_password"}
)
# Query options whose value is a URL of its own (PostgreSQL's, behind a pooler),
# with its own secrets.
URL_VALUED_OPTIONS = frozenset({"liveness_url"})


def redacted(url: str) -> str:
    """``url`` with its password, and the value of every secret option, as ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            userinfo, at, host = parts.netloc.rpartition("@")
            # The netloc comes first after the scheme, which holds no "@".
            url = url.replace(parts.netloc, f"{userinfo.partition(':')[0]}:{MASK}{at}{host}", 1)
        if parts.query:
            query = "&".join(_redacted_option(pair) for pair in parts.query.split("&"))
            start = url.index("?") + 1  # the query starts at the URL's first "?"
            url = url[:start] + query + url[start + len(parts.query) :]
        return url
    except ValueError:
        return "<malformed URL>"


def _redacted_option(pair: str) -> str:
    name, _, value = pair.partition("=")
    if unquote(name).lower() in SECRET_OPTIONS:
        return f"{name}={MASK}"
    if unquote(name).lower() in URL_VALUED_OPTIONS:
        return f"{name}={quote(redacted(unquote(value)), safe=':/@,*?=')}"
    return pair


def _secrets(url: str) -> Iterator[str]:
    """The secrets ``url`` holds, as written and decoded."""
    try:
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        raw = [userinfo.partition(":")[2]] if ":" in userinfo else []
        pairs = [pair.partition("=") for pair in parts.query.split("&")]
        raw += [value for name, _, value in pairs if unquote(name).lower() in SECRET_OPTIONS]
    except ValueError:
        return
    for name, _, value in pairs:
        if unquote(name).lower() in URL_VALUED_OPTIONS:
            yield from _secrets(unquote(value))
    for secret in raw:
        yield from {secret, unquote(secret), quote(unquote(secret), safe="")} - {""}


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message, say) with every secret of ``url`` masked."""
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def one_line(text: str) -> str:
    """A driver's message of several lines (libpq's hints, say) as one."""
    return " ".join(text.split())


class UrlOptions:
    """The query options of one backend URL, read strictly (see the module docstring).

    ``known`` are the options this backend reads itself or passes on; each
    reading method returns one option's value, or ``default`` when it is absent.
    """

    def __init__(self, url: str, backend: str, known: Collection[str]) -> None:
        self.backend = backend
        self.safe_url = redacted(url)
        try:
            pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
        except ValueError as exc:
            raise InvalidInput(f"malformed {backend} URL {self.safe_url!r}: {exc}") from None
        self.values: dict[str, str] = {}
        for name, value in pairs:
            if name in self.values:
                raise self.error(name, "given twice")
            self.values[name] = value
        unknown = sorted(set(self.values) - set(known))
        if unknown:
            raise InvalidInput(
                f"unknown {backend} URL option(s) {', '.join(map(repr, unknown))} in "
                f"{self.safe_url!r}; known: {', '.join(sorted(known))}"
            )

    def error(self, name: str, problem: str) -> InvalidInput:
        url = self.safe_url
        return InvalidInput(f"bad {self.backend} URL option {name}: {problem}, in {url!r}")

    def _raw(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is not None and not value.strip():
            raise self.error(name, "no value")
        return value

    def text(self, name: str, default: str) -> str:
        value = self._raw(name)
        return default if value is None else value

    def flag(self, name: str, default: bool) -> bool:
        """A boolean: 1/0, true/false, yes/no, on/off, in any case; nothing else."""
        value = self._raw(name)
        if value is None:
            return default
        if value.lower() in YES:
            return True
        if value.lower() in NO:
            return False
        raise self.error(name, f"must be one of 1/0, true/false, yes/no, on/off, not {value!r}")

    def number(self, name: str, default: float, *, low: float, high: float) -> float:
        """A finite number within ``[low, high]``."""
        value = self._raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and low <= number <= high):
            raise self.error(name, f"must be a number from {low:g} to {high:g}, not {value!r}")
        return number

    def integer(self, name: str, default: int, *, low: int, high: int) -> int:
        """An integer within ``[low, high]``."""
        value = self._raw(name)
        if value is None:
            return default
        number = int(value) if INTEGER.fullmatch(value.strip()) else None
        if number is None or not low <= number <= high:
            raise self.error(name, f"must be an integer from {low} to {high}, not {value!r}")
        return number
