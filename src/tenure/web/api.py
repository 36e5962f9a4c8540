"""The JSON API: queues, policies, jobs, the dead-letter queue and workers;
with the event stream and ``/metrics``, every endpoint ``tenure.web.endpoints``
declares.

Every handler validates what it reads with tenure's own checks; their
``InvalidInput`` (400), ``InvalidTransition`` (409) and ``JobNotFound`` (404)
become JSON errors in ``tenure.web.asgi_app``. Job shapes are the CLI's
(``tenure jobs --json``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenure.app import App
from tenure.backends.base import Backend
from tenure.backends.checks import LIST_LIMIT
from tenure.core.events import RetriedBy
from tenure.core.names import check_job_id, check_job_ids, check_name, shown
from tenure.core.states import State
from tenure.core.urls import redacted
from tenure.core.workflows import compile_flow
from tenure.errors import InvalidInput
from tenure.flows import flow_from_json
from tenure.formats import job_dict, keys_dict, workflow_dict
from tenure.job import Job
from tenure.metrics import app_registry, read_queues
from tenure.web.endpoints import ENDPOINTS
from tenure.web.responses import JSON, json_object
from tenure.web.sse import EventStream

ENQUEUE_OPTIONS = frozenset({"queue", "delay", "run_at", "priority", "key", "max_attempts",
                             "timeout", "concurrency_key", "debounce", "unique_for"})  # fmt: skip
BODY_MARGIN = 64 * 1024  # what a body holds besides a job's arguments
# A workflow's body: its steps' arguments together (each within max_payload).
WORKFLOW_BODY = 16 * 1024 * 1024


class Api:
    """The API's handlers, over one App (its async API, on the server's loop)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.body_limit = app.max_payload + BODY_MARGIN
        self.workflow_limit = max(self.body_limit, WORKFLOW_BODY)
        self.events = EventStream(app).respond  # GET /api/events
        self.registry = app_registry(app)

    def routes(self) -> list[Route]:
        """A route per endpoint of ``tenure.web.endpoints``, to the handler it names."""
        return [Route(e.path, getattr(self, e.handler), methods=[e.method]) for e in ENDPOINTS]

    async def backend(self) -> Backend:
        return await self.app.abackend()

    # -- queues --------------------------------------------------------------

    async def queues(self, request: Request) -> JSON:
        """Every queue with its jobs counted by state and its lag, and which storage this is."""
        queues = [
            {"name": r.queue, "counts": r.counts, "lag": r.lag}
            for r in await read_queues(await self.backend())
        ]
        return JSON({"storage": redacted(self.app.url), "queues": queues})

    async def policy(self, request: Request) -> JSON:
        queue = check_name("queue", request.path_params["queue"])
        return JSON((await (await self.backend()).get_policy(queue)).to_dict())

    async def set_policy(self, request: Request) -> JSON:
        """Change the fields the body names, as ``tenure policy set`` does; the rest stay."""
        queue = check_name("queue", request.path_params["queue"])
        changes = await json_object(request, self.body_limit)
        policy = await (await self.backend()).change_policy(queue, changes)
        return JSON(policy.to_dict())

    async def keys(self, request: Request) -> JSON:
        """The queue's concurrency keys with queued or active jobs, busiest
        first, and its per-key limits, as ``tenure queue keys --json``."""
        queue = self.app.queue(check_name("queue", request.path_params["queue"]))
        counts = await queue.akey_counts(_limit(request))
        return JSON(keys_dict(queue.name, await queue.apolicy(), counts))

    # -- jobs ----------------------------------------------------------------

    async def jobs(self, request: Request) -> JSON:
        queue, state, after = (_param(request, n) for n in ("queue", "state", "after"))
        page = await self.app.ajobs(queue, state, _limit(request), after)
        return JSON({"jobs": [job_dict(j) for j in page.jobs], "next_cursor": page.next_cursor})

    async def job(self, request: Request) -> JSON:
        return JSON(job_dict(await self.app.aget_job(check_job_id(request.path_params["id"]))))

    async def enqueue(self, request: Request) -> JSON:
        """A job of a task by name: ``{"task": ..., "args": {...}, ...options}``."""
        body = await json_object(request, self.body_limit)
        unknown = sorted(set(body) - ENQUEUE_OPTIONS - {"task", "args"})
        if unknown:
            raise InvalidInput(
                f"unknown field(s) {', '.join(map(repr, unknown))}; known: task, args, "
                f"{', '.join(sorted(ENQUEUE_OPTIONS))}"
            )
        task = check_name("task", body.get("task"))
        options = {k: v for k, v in body.items() if k in ENQUEUE_OPTIONS}
        args: Any = body.get("args")  # JobSpec checks it is an object (or null)
        # enqueue_many takes every option a Task's with_options does (enqueue names fewer).
        [job] = await self.app.aenqueue_many(task, [args], **options)
        return JSON(job_dict(job), 201)

    async def cancel(self, request: Request) -> JSON:
        """Cancel a scheduled or queued job; an active one is marked
        ``cancel_requested``, and its worker stops the attempt."""
        found = await self.app.acancel(check_job_id(request.path_params["id"]))
        return JSON(job_dict(found) if isinstance(found, Job) else workflow_dict(found))

    # -- workflows -------------------------------------------------------------

    async def enqueue_workflow(self, request: Request) -> JSON:
        """``{"flow": <flow>, "key": ...}``: the flow as ``tenure.flows.flow_from_json``
        reads it, stored whole or not at all."""
        body = await json_object(request, self.workflow_limit)
        unknown = sorted(set(body) - {"flow", "key"})
        if unknown or "flow" not in body:
            raise InvalidInput(
                f'a workflow is {{"flow": <a step, chain or group>, "key": <optional>}}; '
                f"got {', '.join(map(repr, sorted(body))) or 'an empty body'}"
            )
        flow = flow_from_json(body["flow"], self.app.max_payload)
        spec = compile_flow(flow, key=body.get("key"))
        workflow = await (await self.backend()).enqueue_workflow(spec)
        return JSON(workflow_dict(workflow), 201)

    async def workflow(self, request: Request) -> JSON:
        return JSON(workflow_dict(await self.app.aget_workflow(_workflow_id(request))))

    async def cancel_workflow(self, request: Request) -> JSON:
        """Cancel each unfinished step (active ones' attempts are stopped), and
        the workflow; a completed or cancelled one is returned as it is."""
        backend = await self.backend()
        return JSON(workflow_dict(await backend.cancel_workflow(_workflow_id(request))))

    # -- the dead-letter queue -------------------------------------------------

    async def dead(self, request: Request) -> JSON:
        """A page of dead jobs, newest first, and how many died of each reason."""
        queue = check_name("queue", request.path_params["queue"])
        page = await self.app.ajobs(queue, State.DEAD, _limit(request), _param(request, "after"))
        reasons = await (await self.backend()).dead_counts(queue)
        return JSON({
            "jobs": [job_dict(j) for j in page.jobs], "next_cursor": page.next_cursor,
            "counts_by_reason": reasons,
        })  # fmt: skip

    async def retry_dead(self, request: Request) -> JSON:
        """``{"ids": [...]}`` or ``{"all": true}``: back to queued, budgets reset;
        ``"by": "dashboard"`` says the dashboard asked (the ``retried`` event's
        ``by``; "api" otherwise)."""
        queue = check_name("queue", request.path_params["queue"])
        body = await json_object(request, self.body_limit)
        ids = _selection(body, {"by"})
        by = body.get("by", RetriedBy.API)
        if by not in (RetriedBy.API, RetriedBy.DASHBOARD):
            raise InvalidInput(f'"by" may be "api" or "dashboard", got {shown(by)}')
        return JSON({"retried": await (await self.backend()).retry_dead(queue, ids, by)})

    async def purge_dead(self, request: Request) -> JSON:
        """As ``retry_dead``, and ``"confirm"`` must repeat the queue's name."""
        queue = check_name("queue", request.path_params["queue"])
        body = await json_object(request, self.body_limit)
        ids = _selection(body, {"confirm"})
        if body.get("confirm") != queue:
            raise InvalidInput(
                f'purging deletes dead jobs for good: confirm with "confirm": {queue!r}'
            )
        return JSON({"purged": await (await self.backend()).purge_dead(queue, ids)})

    # -- workers ---------------------------------------------------------------

    async def workers(self, request: Request) -> JSON:
        """Registered workers, each with how many leases (active jobs) it holds."""
        workers = await (await self.backend()).workers()
        return JSON({"workers": [dataclasses.asdict(w) for w in workers]})

    async def metrics(self, request: Request) -> Response:
        """Prometheus' ``/metrics``: storage's gauges (jobs by queue and state, queue lag)."""
        # The registry reads storage through the App's sync facade: off this loop.
        return Response(
            await run_in_threadpool(generate_latest, self.registry),
            media_type=CONTENT_TYPE_LATEST,
        )


def _param(request: Request, name: str) -> str | None:
    """A query parameter; empty counts as absent (a form's empty field)."""
    return request.query_params.get(name) or None


def _workflow_id(request: Request) -> str:
    return check_job_id(request.path_params["workflow"])


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit") or "50"
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
        raise InvalidInput(f"limit must be an integer within [1, {LIST_LIMIT}], got {shown(raw)}")
    return int(raw)  # the backend checks the range


def _selection(body: dict[str, Any], also: set[str]) -> list[str] | None:
    """The jobs a DLQ action names: ``ids`` (a list) or ``all`` (true), one of them."""
    unknown = sorted(set(body) - {"ids", "all"} - also)
    if unknown:
        raise InvalidInput(f"unknown field(s) {', '.join(map(repr, unknown))}")
    if "ids" in body and "all" not in body:
        ids = check_job_ids(body["ids"])
        if ids:
            return ids
    elif "all" in body and "ids" not in body and body["all"] is True:
        return None
    raise InvalidInput('name the jobs: {"ids": [id, ...]} (not empty) or {"all": true}')
