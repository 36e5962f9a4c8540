"""tenure's dashboard and HTTP API inside a Django project's ASGI application,
for its staff: in the project's ``asgi.py``::

    from django.core.asgi import get_asgi_application
    from tenure.contrib.django import asgi

    application = asgi(get_asgi_application())   # tenure under /tenure/

A request under the path goes to tenure once Django's own session says its
user may in (active staff, by default): an anonymous page request is sent to
``settings.LOGIN_URL``, any other refused request gets 403. tenure's checks of
what a browser sends (cross-site writes refused, its security headers) stay.
Every other request goes to Django. The router also answers the server's
lifespan, which Django's handler does not: tenure's storage opens at start
(a bad URL stops the start) and closes at shutdown.
"""

from __future__ import annotations

from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from tenure.app import App
from tenure.errors import InvalidInput
from tenure.web.responses import error_response
from tenure.web.scope import root_path, route_path

Allow = Callable[[Any], bool]  # of Django's user (an AnonymousUser when none is logged in)

ALLOWED, LOGIN, FORBIDDEN = "allowed", "login", "forbidden"


def staff(user: Any) -> bool:
    """The default ``allow``: the user is active staff (Django's admin's rule)."""
    return bool(user.is_active and user.is_staff)


def asgi(
    django_app: ASGIApp,
    path: str = "/tenure/",
    *,
    app: App | None = None,
    allow: Allow = staff,
    token: str | None = None,
) -> ASGIApp:
    """An ASGI application that serves tenure under ``path`` to the users
    ``allow(user)`` (run in Django's thread, as a view is) lets in, and
    everything else with ``django_app``. ``app``: the project's App by default.
    ``token`` (default ``$TENURE_TOKEN``, if set) would be needed as well."""
    prefix = "/" + path.strip("/")
    if prefix == "/":
        raise InvalidInput("tenure's path must not be the site's root: use one such as /tenure/")
    served: list[ASGIApp] = []

    def tenure_app() -> App:
        if app is not None:
            return app
        from tenure.contrib.django.transactions import project_app

        return project_app()

    def server() -> ASGIApp:
        if not served:
            from tenure.web import asgi_app

            served.append(asgi_app(tenure_app(), token=token, any_host=True))
        return served[0]

    async def router(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(tenure_app, receive, send)
            return
        where, root = route_path(scope), root_path(scope)
        if where == prefix and scope["type"] == "http":
            await _redirect(send, root + prefix + "/")
        elif where.startswith(prefix + "/") and scope["type"] == "http":
            verdict, location = await _verdict(scope, allow)
            if verdict == ALLOWED:
                inner = {**scope, "root_path": root + prefix}
                await server()(inner, receive, send)
            elif verdict == LOGIN:
                await _redirect(send, location)
            else:
                refusal = error_response(403, "Forbidden", "this site's staff only")
                await refusal(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return router


async def _lifespan(tenure_app: Callable[[], App], receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await tenure_app().abackend()
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await tenure_app().aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _redirect(send: Send, location: str) -> None:
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 302, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _verdict(scope: Scope, allow: Allow) -> tuple[str, str]:
    """Whether Django lets the request in; where to log in, if it should."""
    from asgiref.sync import sync_to_async

    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    page = scope["method"] == "GET" and "text/html" in headers.get("accept", "")
    query = scope.get("query_string", b"").decode("latin-1")
    next_url = quote(root_path(scope) + route_path(scope)) + (f"?{query}" if query else "")
    judged: tuple[str, str] = await sync_to_async(_judge, thread_sensitive=True)(
        headers.get("cookie", ""), allow, next_url if page else None
    )
    return judged


def _judge(cookies: str, allow: Allow, next_url: str | None) -> tuple[str, str]:
    """In Django's thread: the session's user, and what becomes of the request."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import get_user
    from django.contrib.auth.views import redirect_to_login
    from django.db import close_old_connections
    from django.http import HttpRequest

    close_old_connections()  # as around a request of Django's own
    try:
        jar: SimpleCookie = SimpleCookie()
        jar.load(cookies)
        name = settings.SESSION_COOKIE_NAME
        key = jar[name].value if name in jar else None
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
        user = get_user(request)
        if allow(user):
            return ALLOWED, ""
        if next_url is not None and not user.is_authenticated:
            return LOGIN, redirect_to_login(next_url)["Location"]
        return FORBIDDEN, ""
    finally:
        close_old_connections()
