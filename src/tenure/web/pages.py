"""The dashboard: server-rendered pages (Jinja2, every value escaped) and one
static script that makes them live and sends their actions to the JSON API.

No inline script and no inline handler: the CSP allows scripts from this
server only. Actions go through the API with JSON bodies, so the pages need no
endpoints of their own and share the API's checks and CSRF guard.
"""

from __future__ import annotations

import re
import time
import unicodedata
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from tenure.app import App
from tenure.backends.base import Backend
from tenure.config import policy_fields
from tenure.core.names import check_job_id, check_name
from tenure.core.states import UNFINISHED, State, parse_state
from tenure.core.urls import redacted
from tenure.core.workflows import WorkflowState, is_workflow_id
from tenure.flows import culprit
from tenure.formats import StepRow, seconds, spans, summary, to_json, when, workflow_steps
from tenure.job import Job
from tenure.metrics import read_queues
from tenure.web.guard import has_session

# Characters that change how the text around them reads without showing
# themselves: bidirectional overrides, zero-width and other format characters,
# controls, line separators. A worker named "…\u202eevil" must not show as "live".
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n\t]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(value: Any) -> Any:
    """Text with its invisible characters written as escapes (``\\u202e``), as
    dashboard.js's ``visible`` does; other values as they are. Every ``{{ }}``
    of the templates goes through it (``finalize``); ``raw`` opts out, for ids
    sent back to the server."""
    if type(value) is not str or (value.isascii() and value.isprintable()):
        return value
    return _NOT_PLAIN.sub(_escape, value)


class Raw(str):
    """A value shown as it is: an id in a link or a form, which must reach the
    server unchanged (the page's escaping of markup still applies)."""

    __slots__ = ()


TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("tenure.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    finalize=visible,
)
PAGE_SIZE = 50
# The overview's charts and feed open with this many seconds of stored events,
# so that a page opened after an incident shows it.
HISTORY = 900
# A task filter looks through at most these many pages of the listing for one
# page of its task's jobs: storage has no index by task.
FILTER_PAGES = 20
ARGS_SHOWN = 80  # characters of a job's arguments in a listing
# A workflow's page draws this many of its steps at most (and is live only if
# it draws them all): a browser's page of 100,000 boxes is of no use to anyone.
STEPS_SHOWN = 2000
KEYS_SHOWN = 20  # a queue's busiest concurrency keys on its page


def shortened(value: Any) -> str:
    """A value as JSON, cut to ARGS_SHOWN characters."""
    text = to_json(value)
    return text if len(text) <= ARGS_SHOWN else text[: ARGS_SHOWN - 1] + "…"


def age(ts: float) -> str:
    """How long ago ``ts`` was, in the largest unit that fits: ``42 s``, ``3 min``, ``5 h``."""
    ago = max(0.0, time.time() - ts)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if ago >= size:
            return f"{int(ago // size)} {unit}"
    return f"{int(ago)} s"


TEMPLATES.filters.update(when=when, seconds=seconds, summary=summary, to_json=to_json, raw=Raw,
                         shortened=shortened, age=age, spans=spans)  # fmt: skip


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
            Route("/jobs", self.find, methods=["GET"]),
            Route("/jobs/{id}", self.job, methods=["GET"]),
            Route("/queues/{queue}/jobs", self.jobs, methods=["GET"]),
            Route("/queues/{queue}/dead", self.dead, methods=["GET"]),
            Route("/queues/{queue}/policy", self.policy, methods=["GET"]),
            Route("/workers", self.workers, methods=["GET"]),
            Route("/workflows/{id}", self.workflow, methods=["GET"]),
            Mount("/static", StaticFiles(packages=[("tenure.web", "static")]), name="static"),
        ]

    async def backend(self) -> Backend:
        return await self.app.abackend()

    async def overview(self, request: Request) -> HTMLResponse:
        queues = await read_queues(await self.backend())
        return render(request, "overview.html", queues=queues, storage=redacted(self.app.url),
                      history=HISTORY)  # fmt: skip

    async def job(self, request: Request) -> HTMLResponse:
        job = await self.app.aget_job(check_job_id(request.path_params["id"]))
        policy = await (await self.backend()).get_policy(job.queue)
        return render(request, "job.html", job=job, policy=policy,
                           live=job.state in UNFINISHED)  # fmt: skip

    async def find(self, request: Request) -> Response:
        """The header's search: to the job's page, which takes a unique prefix
        and lists the jobs an ambiguous one names; a workflow's id, to its page."""
        wanted = check_job_id(request.query_params.get("id", "").strip())
        root = str(request.scope.get("root_path", "")).rstrip("/")
        page = "workflows" if is_workflow_id(wanted) else "jobs"
        return RedirectResponse(f"{root}/{page}/{quote(wanted, safe='')}", status_code=303)

    async def jobs(self, request: Request) -> HTMLResponse:
        """A page of the queue's jobs, newest first, in one state and of one task if asked."""
        queue = check_name("queue", request.path_params["queue"])
        named = request.query_params.get("state") or None
        state = None if named is None else parse_state(named)
        task = request.query_params.get("task") or None
        if task is not None:
            check_name("task", task)
        after = request.query_params.get("after") or None
        jobs: list[Job] = []
        looked = 0
        while looked < (FILTER_PAGES if task else 1) * PAGE_SIZE:
            page = await self.app.ajobs(queue, state, PAGE_SIZE, after)
            looked += len(page.jobs)
            jobs += [j for j in page.jobs if task is None or j.task == task]
            after = page.next_cursor
            if after is None or len(jobs) >= PAGE_SIZE:
                break
        return render(request, "jobs.html", queue=queue, state=state, task=task, jobs=jobs,
                      next_cursor=after, looked=looked)  # fmt: skip

    async def dead(self, request: Request) -> HTMLResponse:
        queue = check_name("queue", request.path_params["queue"])
        after = request.query_params.get("after") or None
        page = await self.app.ajobs(queue, State.DEAD, PAGE_SIZE, after)
        reasons = await (await self.backend()).dead_counts(queue)
        return render(request, "dead.html", queue=queue, page=page, reasons=reasons)

    async def policy(self, request: Request) -> HTMLResponse:
        """The queue's page: its policy's editor, and its busiest concurrency keys."""
        queue = self.app.queue(check_name("queue", request.path_params["queue"]))
        policy = await queue.apolicy()
        fields = [(f, getattr(policy, f.name)) for f in policy_fields()]
        return render(request, "policy.html", queue=queue.name, fields=fields, limits=policy,
                      keys=await queue.akey_counts(KEYS_SHOWN), keys_shown=KEYS_SHOWN)  # fmt: skip

    async def workers(self, request: Request) -> HTMLResponse:
        return render(request, "workers.html", workers=await (await self.backend()).workers())

    async def workflow(self, request: Request) -> HTMLResponse:
        """A workflow's steps in columns by depth (a column's steps wait only
        for steps of the columns before it), live while any step is unfinished."""
        workflow = await self.app.aget_workflow(check_job_id(request.path_params["id"]))
        steps = workflow_steps(workflow)
        shown = steps[:STEPS_SHOWN]
        columns: list[list[StepRow]] = [[] for _ in range(max((r.depth for r in shown),
                                                                default=-1) + 1)]  # fmt: skip
        for row in shown:
            columns[row.depth].append(row)
        counts = {s: n for s in State if (n := sum(1 for j in workflow.jobs if j.state is s))}
        number = {r.job.id: r.number for r in steps}
        failed = culprit(workflow) if workflow.state is WorkflowState.FAILED else None
        moving = any(j.state in UNFINISHED for j in workflow.jobs)
        live = len(shown) == len(steps) and (workflow.state is WorkflowState.RUNNING or moving)
        return render(request, "workflow.html", workflow=workflow, columns=columns, counts=counts,
                      sinks=[number[i] for i in workflow.sinks if i in number], live=live,
                      edges=sum(len(r.waits_for) for r in shown), number=number, failed=failed,
                      hidden=len(steps) - len(shown))  # fmt: skip
