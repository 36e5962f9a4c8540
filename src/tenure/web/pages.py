"""The dashboard: server-rendered pages (Jinja2, every value escaped) and one
static script that makes them live and sends their actions to the JSON API.

No inline script and no inline handler: the CSP allows scripts from this
server only. Actions go through the API with JSON bodies, so the pages need no
endpoints of their own and share the API's checks and CSRF guard.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from tenure.app import App
from tenure.backends.base import Backend
from tenure.cli.output import seconds, summary, to_json, when
from tenure.core.names import check_job_id, check_name
from tenure.core.states import UNFINISHED, State
from tenure.core.urls import redacted
from tenure.metrics import read_queues
from tenure.web.guard import has_session

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("tenure.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
TEMPLATES.filters.update(when=when, seconds=seconds, summary=summary, to_json=to_json)
PAGE_SIZE = 50


def render(request: Request, name: str, code: int = 200, **values: Any) -> HTMLResponse:
    root = str(request.scope.get("root_path", "")).rstrip("/")
    # The session cookie is HttpOnly: the page, not its script, offers to log out.
    session = has_session(request)
    page = TEMPLATES.get_template(name).render(
        root=root, states=list(State), session=session, **values
    )
    return HTMLResponse(page, code)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", status, status=status, message=message)


class Pages:
    """The dashboard's pages, over one App (its async API, on the server's loop)."""

    def __init__(self, app: App) -> None:
        self.app = app

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.overview, methods=["GET"]),
            Route("/jobs/{id}", self.job, methods=["GET"]),
            Route("/queues/{queue}/dead", self.dead, methods=["GET"]),
            Route("/queues/{queue}/policy", self.policy, methods=["GET"]),
            Route("/workers", self.workers, methods=["GET"]),
            Mount("/static", StaticFiles(packages=[("tenure.web", "static")]), name="static"),
        ]

    async def backend(self) -> Backend:
        return await self.app.abackend()

    async def overview(self, request: Request) -> HTMLResponse:
        queues = await read_queues(await self.backend())
        return render(request, "overview.html", queues=queues, storage=redacted(self.app.url))

    async def job(self, request: Request) -> HTMLResponse:
        job = await self.app.aget_job(check_job_id(request.path_params["id"]))
        policy = await (await self.backend()).get_policy(job.queue)
        return render(request, "job.html", job=job, policy=policy,
                           live=job.state in UNFINISHED)  # fmt: skip

    async def dead(self, request: Request) -> HTMLResponse:
        queue = check_name("queue", request.path_params["queue"])
        after = request.query_params.get("after") or None
        page = await self.app.ajobs(queue, State.DEAD, PAGE_SIZE, after)
        reasons = await (await self.backend()).dead_counts(queue)
        return render(request, "dead.html", queue=queue, page=page, reasons=reasons)

    async def policy(self, request: Request) -> HTMLResponse:
        queue = check_name("queue", request.path_params["queue"])
        policy = await (await self.backend()).get_policy(queue)
        fields = [(f.name, getattr(policy, f.name)) for f in dataclasses.fields(policy)]
        return render(request, "policy.html", queue=queue, fields=fields)

    async def workers(self, request: Request) -> HTMLResponse:
        return render(request, "workers.html", workers=await (await self.backend()).workers())
