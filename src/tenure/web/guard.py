"""Who may use the server, and what every response carries.

- Without a token, the server answers only requests addressed to a loopback
  host (``Host: localhost``, ``127.0.0.1``, ``[::1]``): a page of another site
  that rebinds its own name to 127.0.0.1 (DNS rebinding) is refused. With a
  token and ``hosts``, only those and loopback hosts are answered.
- With a token, every request but the login form's presents it: the header
  ``Authorization: Bearer <token>``, or the session cookie the login form sets
  (HttpOnly, SameSite=Strict, Secure over https): a random session id that
  the server remembers until its expiry or its logout (``tenure.web.sessions``).
  Tokens are compared in constant time.
- A request that changes something (any method but GET, HEAD and OPTIONS) that
  a browser sends must come from the server's own pages: ``Sec-Fetch-Site``
  ``same-origin`` (or ``none``: the user typed it), ``Origin`` the server's own
  host; else 403. The bearer header is exempt: no page of another site can make
  a browser send it.
- Failed token attempts (a wrong bearer token, a wrong token in the login
  form) are limited per client address (the connection's peer, or the
  address a proxy the server trusts forwards), in memory: past
  LOGIN_FAILURES within LOGIN_WINDOW seconds, every token attempt from it
  gets 429 (the right token too: else guessing would go on at full speed)
  until the oldest failure ages out. The login form and that count are
  ``tenure.web.login``'s.
- Every response carries the security headers below: a CSP without inline
  script, ``nosniff``, no framing, no referrer to other sites, no caching.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.core.hosts import check_host_name, host_name, is_loopback
from tenure.errors import InvalidInput
from tenure.web.login import (
    LOGIN_FAILURES,
    LOGIN_PATHS,
    LOGIN_WINDOW,
    Login,
    LoginThrottle,
    too_many_attempts,
)
from tenure.web.responses import error_response
from tenure.web.scope import client_address, root_path, route_path, session_cookie
from tenure.web.sessions import SESSION_HOURS, Sessions

SESSION = "tenure.session"  # the scope's key: whether the request came with a live session
MIN_TOKEN_LENGTH = 16
TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII: what a header carries unchanged
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_SITE = frozenset({"same-origin", "none"})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not no-referrer: with it, a browser sends a form's POST with "Origin: null",
    # which the CSRF check must refuse.
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
NEW_TOKEN_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def check_token(token: object) -> str:
    """A token fit to guard the server: printable ASCII, at least 16 characters."""
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH or not TOKEN.fullmatch(token):
        raise InvalidInput(
            f"a token is at least {MIN_TOKEN_LENGTH} printable ASCII characters without "
            f"spaces; make one with: {NEW_TOKEN_HINT}"
        )
    return token


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


class Guard:
    """ASGI middleware: the rules of the module docstring, before ``inner`` sees a request.

    ``any_host``: answer any ``Host`` without a token, for an app mounted
    behind its owner's own authentication. ``hosts``: with a token, the host
    names (besides loopback ones) requests may be addressed to; none: any.
    ``session_hours``: how long a login lasts."""

    def __init__(
        self,
        inner: ASGIApp,
        token: str | None,
        *,
        any_host: bool = False,
        hosts: Iterable[str] = (),
        session_hours: float = SESSION_HOURS,
    ) -> None:
        self.inner = inner
        self.token = None if token is None else check_token(token)
        self.any_host = any_host
        self.hosts = frozenset(check_host_name(h) for h in hosts)
        if self.hosts and token is None:
            raise InvalidInput(
                "allowed hosts need a token: without one, the server answers localhost only"
            )
        self._digest = None if token is None else _digest(token)
        self.sessions = Sessions(session_hours)
        self.throttle = LoginThrottle()
        self.login = Login(self.matches, self.sessions, self.throttle)

    def protection(self, source: str = "") -> str:
        """What guards the server, in one line (``tenure serve`` says it at
        start); ``source``: where the token came from."""
        if self.token is None:
            return "token: none; hosts: " + ("any" if self.any_host else "localhost only")
        hosts = (", ".join(sorted(self.hosts)) + " and localhost" if self.hosts
                 else "any (--allow-host names them)")  # fmt: skip
        return f"token: required{f' ({source})' if source else ''}; hosts: {hosts}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _with_security_headers(message.get("headers", []))
            await send(message)

        request = Request(scope)
        refusal = self.refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send_guarded)
        elif self.token is not None and route_path(scope) in LOGIN_PATHS:
            await self.login(scope, receive, send_guarded)
        else:
            await self.inner(scope, receive, send_guarded)

    def refusal(self, request: Request) -> Response | None:
        """The response that refuses ``request``, or None to let it through."""
        misdirected = self.misdirected(request)
        if misdirected is not None:
            return misdirected
        if self.token is not None and self.tries_token(request):
            wait = self.throttle.wait(client_address(request))
            if wait > 0:
                return too_many_attempts(request, wait)
        bearer = self.bearer_ok(request)
        if self.token is not None and _bearer(request) is not None and not bearer:
            self.throttle.failed(client_address(request))
        request.scope[SESSION] = session = self.cookie_ok(request)
        needs_token = self.token is not None and route_path(request.scope) not in LOGIN_PATHS
        if needs_token and not (bearer or session):
            return self.unauthenticated(request)
        if request.method not in SAFE_METHODS and not bearer and cross_site(request):
            return error_response(
                403, "Forbidden", "cross-site request refused: send it from this server's pages"
            )
        return None

    def misdirected(self, request: Request) -> Response | None:
        """403 for a request addressed to a host this server does not answer."""
        name = host_name(request.headers.get("host", ""))
        if self.token is None and not self.any_host and not is_loopback(name):
            return error_response(
                403,
                "Forbidden",
                "this server has no token, so it answers only requests addressed to "
                "localhost; to serve other hosts, start it with TENURE_TOKEN set",
            )
        if self.hosts and name not in self.hosts and not is_loopback(name):
            return error_response(
                403,
                "Forbidden",
                f"this server answers only requests addressed to {', '.join(sorted(self.hosts))}"
                " (--allow-host) or localhost",
            )
        return None

    def matches(self, given: str) -> bool:
        return self._digest is not None and hmac.compare_digest(_digest(given), self._digest)

    def bearer_ok(self, request: Request) -> bool:
        given = _bearer(request)
        return given is not None and self.matches(given)

    @staticmethod
    def tries_token(request: Request) -> bool:
        """Whether ``request`` presents a token to check: a bearer, or a login."""
        login = request.method == "POST" and route_path(request.scope) == "/login"
        return login or _bearer(request) is not None

    def cookie_ok(self, request: Request) -> bool:
        """Whether ``request`` carries a live session."""
        given = request.cookies.get(session_cookie(request.scope))
        return self.token is not None and given is not None and self.sessions.live(given)

    def unauthenticated(self, request: Request) -> Response:
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(root_path(request.scope) + "/login", 303)
        response = error_response(
            401, "Unauthorized", "this server needs its token: Authorization: Bearer <token>"
        )
        response.headers["www-authenticate"] = 'Bearer realm="tenure"'
        return response


def _bearer(request: Request) -> str | None:
    """The bearer token the request presents, if any."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


def cross_site(request: Request) -> bool:
    """Whether a browser sent ``request`` from a page of another site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in SAME_SITE:
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False  # not a browser's cross-origin request: they all say where from
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return True
    return netloc.lower() != request.headers.get("host", "").lower()


def has_session(request: Request) -> bool:
    """Whether ``request`` came with a live session (a page offers to log out)."""
    return bool(request.scope.get(SESSION))


def _with_security_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    out = list(headers)
    names = {name.lower() for name, _ in out}
    out += [(name, value) for name, value in SECURITY_HEADERS if name not in names]
    if b"cache-control" not in names:
        out.append((b"cache-control", b"no-store"))
    return out


__all__ = [
    "LOGIN_FAILURES",
    "LOGIN_WINDOW",
    "NEW_TOKEN_HINT",
    "Guard",
    "LoginThrottle",
    "check_token",
    "cross_site",
    "has_session",
    "route_path",
]
