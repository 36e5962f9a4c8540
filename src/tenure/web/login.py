"""The login form: a token for a session cookie, and the logout that ends it.

``GET /login`` is the form, ``POST /login`` checks the token it sends and
answers with a new session's cookie (HttpOnly, SameSite=Strict, Secure over
https) and the way to the dashboard, or the form again; ``POST /logout`` ends
the session. Wrong tokens are counted per client address by a
``LoginThrottle``, which the guard shares for wrong bearer tokens.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from urllib.parse import parse_qs

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from tenure.web.responses import error_response, read_body
from tenure.web.scope import client_address, root_path, route_path, session_cookie
from tenure.web.sessions import Sessions

LOGIN_PATHS = frozenset({"/login", "/logout"})
LOGIN_FAILURES = 10  # failed token attempts a client address may make ...
LOGIN_WINDOW = 60.0  # ... within this many seconds, before it gets 429
THROTTLED_CLIENTS = 10_000  # addresses remembered: the oldest are forgotten past it
LOGIN_BODY_LIMIT = 4096
FORM = jinja2.Environment(
    loader=jinja2.PackageLoader("tenure.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
).get_template("login.html")


class LoginThrottle:
    """Failed token attempts per client address, in memory: past ``limit``
    within ``window`` seconds, the address waits until the oldest ages out."""

    def __init__(
        self,
        limit: int = LOGIN_FAILURES,
        window: float = LOGIN_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds ``client`` must wait before its next attempt (0: none)."""
        failed = self.failures.get(client)
        if failed is None:
            return 0.0
        now = self.clock()
        while failed and failed[0] <= now - self.window:
            failed.popleft()
        if not failed:
            del self.failures[client]
            return 0.0
        return failed[0] + self.window - now if len(failed) >= self.limit else 0.0

    def failed(self, client: str) -> None:
        failed = self.failures.setdefault(client, deque(maxlen=self.limit))
        failed.append(self.clock())
        self.failures.move_to_end(client)
        if len(self.failures) > THROTTLED_CLIENTS:  # many addresses (IPv6): memory stays bounded
            self.failures.popitem(last=False)


class Login:
    """The ASGI app of ``LOGIN_PATHS``: ``matches`` says whether a token is the
    server's; a login starts one of ``sessions``; a wrong token counts in ``throttle``."""

    def __init__(
        self, matches: Callable[[str], bool], sessions: Sessions, throttle: LoginThrottle
    ) -> None:
        self.matches, self.sessions, self.throttle = matches, sessions, throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The login form (GET), a login (POST): its cookie, or the form again;
        or a logout (POST /logout): the session ended."""
        request = Request(scope, receive)
        await (await self.respond(request))(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        if route_path(request.scope) == "/logout":
            if request.method != "POST":
                return error_response(405, "MethodNotAllowed", "log out with a POST")
            return self.logged_out(request)
        if request.method != "POST":
            return login_page("")
        try:
            body = await read_body(request, LOGIN_BODY_LIMIT)
        except HTTPException as exc:  # outside Starlette's handlers, here
            return error_response(exc.status_code, "HTTPError", exc.detail)
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
        if self.matches(given):
            return self.logged_in(request)
        self.throttle.failed(client_address(request))
        return login_page("wrong token", 401)

    def logged_in(self, request: Request) -> Response:
        """The way back to the dashboard, with a new session's cookie."""
        root = root_path(request.scope)
        response = RedirectResponse(root + "/", 303)
        response.set_cookie(
            session_cookie(request.scope),
            self.sessions.start(),
            max_age=int(self.sessions.seconds),
            path=root + "/",
            httponly=True,
            samesite="strict",
            # The scheme the client used: a proxy's X-Forwarded-Proto, when trusted.
            secure=request.url.scheme == "https",
        )
        return response

    def logged_out(self, request: Request) -> Response:
        """The way back to the login form: the session ended, its cookie cleared."""
        given = request.cookies.get(session_cookie(request.scope))
        if given is not None:
            self.sessions.end(given)
        root = root_path(request.scope)
        response = RedirectResponse(root + "/login", 303)
        response.delete_cookie(
            session_cookie(request.scope),
            path=root + "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response


def too_many_attempts(request: Request, wait: float) -> Response:
    """429, with Retry-After: a page for the login form, JSON otherwise."""
    seconds = math.ceil(wait)
    message = f"too many wrong tokens from your address: try again in {seconds} s"
    if route_path(request.scope) == "/login":
        response = login_page(message, 429)
    else:
        response = error_response(429, "TooManyAttempts", message)
    response.headers["retry-after"] = str(seconds)
    return response


def login_page(message: str, status: int = 200) -> Response:
    """The login form, with ``message`` above it (one of ours, never input)."""
    return HTMLResponse(FORM.render(message=message), status)
