"""tenure in a FastAPI (or Starlette) application: ``pip install 'tenure[fastapi]'``.

- ``lifespan(tenure_app)``: the application's lifespan. It opens the App's
  backend on the server's event loop at start (a bad URL or a storage that is
  down stops the start, not the first request) and closes it at shutdown, so
  no connection outlives the server. ``inner`` is the application's own
  lifespan, run inside it: its state is kept, beside tenure's.
- ``TenureApp``: the dependency that gives an endpoint the App the lifespan
  opened; ``await app.aenqueue(...)`` and ``await app.aresult(job.id)`` on it.
- ``mount(fastapi_app, tenure_app, allow=...)``: the dashboard and the HTTP API
  under a prefix, behind the host application's own authentication: ``allow``
  decides each request before tenure sees it (403 otherwise). tenure's checks
  of what a browser sends (cross-site writes refused, security headers) stay.

An endpoint uses the App of the lifespan's state rather than a global one, so
that a test builds the application with an App of its own.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from tenure.app import App
from tenure.web import asgi_app
from tenure.web.responses import error_response

STATE_KEY = "tenure"  # the lifespan state's key that holds the App

# What FastAPI(lifespan=...) takes: tenure's yields its state; the application's may yield none.
Lifespan = Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]
OwnLifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]
Allow = Callable[[Request], bool | Awaitable[bool]]


def lifespan(tenure_app: App, inner: OwnLifespan | None = None) -> Lifespan:
    """A lifespan for ``FastAPI(lifespan=...)`` that opens ``tenure_app`` at
    start and closes it at shutdown, around ``inner`` (the application's own
    lifespan, if any: it starts after tenure opens and ends before tenure closes,
    so its start and end may enqueue)."""

    @asynccontextmanager
    async def run(server_app: Any) -> AsyncIterator[dict[str, Any]]:
        await tenure_app.abackend()  # opened on the server's loop, where endpoints run
        try:
            if inner is None:
                yield {STATE_KEY: tenure_app}
            else:
                async with inner(server_app) as state:
                    yield {**(state or {}), STATE_KEY: tenure_app}
        finally:
            await tenure_app.aclose()

    return run


async def get_app(request: Request) -> App:
    """The App that ``lifespan`` opened: a dependency (see ``TenureApp``);
    async, so FastAPI calls it on the loop rather than in its thread pool."""
    tenure_app = getattr(request.state, STATE_KEY, None)
    if not isinstance(tenure_app, App):
        raise RuntimeError(
            "no tenure App in the lifespan's state: build the application with "
            "FastAPI(lifespan=tenure.contrib.fastapi.lifespan(app))"
        )
    return tenure_app


TenureApp = Annotated[App, Depends(get_app)]


class Allowed:
    """ASGI middleware: ``allow(request)`` decides each HTTP request before
    ``inner`` sees it; a refused one gets 403. (tenure serves no WebSocket:
    one goes on to its router, which closes it.)"""

    def __init__(self, inner: ASGIApp, allow: Allow) -> None:
        self.inner = inner
        self.allow = allow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            verdict = self.allow(Request(scope, receive))
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                refusal = error_response(403, "Forbidden", "this application refused the request")
                await refusal(scope, receive, send)
                return
        await self.inner(scope, receive, send)


def mount(
    fastapi_app: FastAPI,
    tenure_app: App,
    path: str = "/tenure",
    *,
    allow: Allow,
    token: str | None = None,
) -> None:
    """Serve tenure's dashboard and HTTP API under ``path`` of ``fastapi_app``,
    to the requests that ``allow(request)`` (sync or async) returns True for.
    Any host may be addressed, as the host application decides who gets in;
    ``token`` (default: ``$TENURE_TOKEN``, if set) would be needed as well.
    ``tenure_app`` is opened and closed by ``lifespan``: pass the same App."""
    server = asgi_app(tenure_app, token=token, any_host=True)
    fastapi_app.mount(path, Allowed(server, allow), name="tenure")


__all__ = ["Allowed", "TenureApp", "get_app", "lifespan", "mount"]
