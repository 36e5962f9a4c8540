"""``tenure serve``: the HTTP API, live lifecycle events over SSE, the dashboard
and Prometheus' ``/metrics``.

Built on Starlette rather than FastAPI: the ``web`` extra already installs it,
and FastAPI would add pydantic to validate what tenure's own checks validate
already (with the messages the CLI and the library give); the OpenAPI document
is derived from tenure's dataclasses instead (``tenure.web.openapi``).

``asgi_app(app)`` is the whole server as one ASGI app, which ``tenure serve``
runs under uvicorn and which a user may mount in their own ASGI app::

    from starlette.routing import Mount
    routes = [Mount("/tenure", app=tenure.web.asgi_app(app, token=...))]

Importing ``tenure`` never imports this package (nor Starlette).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenure.app import App
from tenure.errors import BackendUnavailable, InvalidInput, InvalidTransition, JobNotFound
from tenure.web.api import Api
from tenure.web.guard import Guard, route_path
from tenure.web.openapi import document
from tenure.web.pages import Pages, error_page
from tenure.web.responses import JSON, error_response
from tenure.web.sessions import SESSION_HOURS

# tenure's errors as HTTP: the most specific class first (InvalidTransition is an InvalidInput).
STATUS: dict[type[Exception], int] = {
    InvalidTransition: 409,
    InvalidInput: 400,
    JobNotFound: 404,
    BackendUnavailable: 503,
}


def asgi_app(
    app: App,
    *,
    token: str | None = None,
    any_host: bool = False,
    hosts: Iterable[str] = (),
    session_hours: float = SESSION_HOURS,
) -> Guard:
    """The server over ``app``: its API, events and dashboard, behind
    ``tenure.web.guard.Guard``. ``token`` (default: ``$TENURE_TOKEN``, if set) is
    then needed by every request. Without one, only requests addressed to
    localhost are answered, unless ``any_host`` (your own app authenticates
    requests before they reach this one). With a token, ``hosts`` names the
    hosts (besides localhost) requests may be addressed to (none: any), and
    a login lasts ``session_hours``. The App's backend on the server's loop is
    the caller's to close (``await app.aclose()``)."""
    token = token if token is not None else os.environ.get("TENURE_TOKEN") or None
    openapi = JSON(document())

    async def openapi_json(request: Request) -> Response:
        return openapi

    routes = [
        Route("/api/openapi.json", openapi_json, methods=["GET"]),
        *Api(app).routes(),
        *Pages(app).routes(),
    ]
    handlers = {cls: _error_handler(status) for cls, status in STATUS.items()}
    server = Starlette(
        routes=routes,
        exception_handlers={
            **handlers,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
    )
    return Guard(server, token, any_host=any_host, hosts=hosts, session_hours=session_hours)


def _error_handler(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        return _error(request, status, type(exc).__name__, str(exc) or type(exc).__name__)

    return handler


def _error(request: Request, status: int, error: str, message: str) -> Response:
    """A JSON error; a page, for a browser that asked for a page."""
    wants_page = "text/html" in request.headers.get("accept", "")
    if wants_page and not route_path(request.scope).startswith("/api/"):
        return error_page(request, status, message)
    return error_response(status, error, message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = _error(request, exc.status_code, "HTTPError", exc.detail)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _unexpected(request: Request, exc: Exception) -> Response:
    # Starlette raises it again after this response, for the server to log.
    return error_response(500, "InternalError", "unexpected error; see the server's log")


__all__ = ["asgi_app"]
