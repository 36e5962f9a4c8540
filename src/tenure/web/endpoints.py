"""The HTTP API's endpoints, each declared once: its method and path, the
handler that serves it, and what its OpenAPI operation says.

``Api.routes`` builds the server's route table from this declaration and
``tenure.web.openapi.document`` the document, so that neither can list an
endpoint the other lacks (``tests/web/test_openapi.py`` checks the two).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tenure.backends.checks import LIST_LIMIT
from tenure.config import MAX_SECONDS
from tenure.core.states import State
from tenure.web.schemas import (
    COUNTS,
    JOB_ID,
    KEYS,
    NAME,
    QUEUE_ROW,
    SELECTION,
    SELECTION_FIELDS,
    closed_object,
    page,
    policy_schema,
    ref,
    type_schema,
)


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A response whose body is JSON of ``schema``."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def text_response(media_type: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def parameter(where: str, name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",  # a path's parameters always are
        "schema": schema,
        "description": description,
    }


def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return parameter("query", name, schema, description)


@dataclass(frozen=True)
class Endpoint:
    """One method on one path. ``handler``: the name of ``Api``'s attribute
    that serves it. ``errors``: the error statuses it may answer besides
    every endpoint's (``tenure.web.openapi.COMMON_ERRORS``); ``notes``: an
    error's description of its own, over the usual one."""

    method: str
    path: str
    handler: str
    summary: str
    ok: dict[str, Any]  # the response of success
    errors: tuple[int, ...] = ()
    parameters: list[dict[str, Any]] = field(default_factory=list)  # query and header ones
    body: dict[str, Any] | None = None  # the JSON request body's schema
    created: bool = False  # success is 201, not 200
    notes: dict[int, str] = field(default_factory=dict)


# The parameters of a path, by name: each path that has one shares it.
PATH_PARAMETERS = {
    "queue": parameter("path", "queue", NAME, "the queue's name"),
    "id": parameter("path", "id", JOB_ID, "the job's id"),
    "workflow": parameter("path", "workflow", JOB_ID, "the workflow's id (wf-...)"),
}
PAGING = [
    query("limit", {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT}, "page size"),
    query("after", {"type": "string"}, "the next_cursor of the previous page"),
]
EVENTS_FROM = [
    query("queue", NAME, "only this queue"),
    query("after", {"type": "string"}, "start after this event id"),
    query(
        "since",
        {"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
        "without after: start with the events of the last this many seconds (storage's clock)",
    ),
    {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "the last event id seen (a reconnecting EventSource sends it); "
        "wins over after",
    },
]
A_JOB = json_response(ref("Job"), "the job")
A_WORKFLOW = json_response(ref("Workflow"), "the workflow, with its steps (jobs without history)")
# A request body: its limit (413) and its media type (415) are checked.
WITH_BODY = (413, 415)


def path_parameters(path: str) -> list[dict[str, Any]]:
    """The parameters ``path``'s ``{name}`` segments stand for."""
    return [PATH_PARAMETERS[name] for name in re.findall(r"\{(\w+)\}", path)]


ENDPOINTS = (
    Endpoint(
        "GET", "/api/queues", "queues", "Queues, with their jobs counted by state",
        json_response(closed_object(storage={"type": "string"},
                                    queues={"type": "array", "items": QUEUE_ROW}), "the queues"),
    ),
    Endpoint(
        "GET", "/api/queues/{queue}/policy", "policy", "A queue's policy",
        json_response(ref("Policy"), "the policy"),
    ),
    Endpoint(
        "PUT", "/api/queues/{queue}/policy", "set_policy",
        "Change fields of a queue's policy; the others stay",
        json_response(ref("Policy"), "the policy stored"), errors=WITH_BODY,
        body=policy_schema(required=False),
    ),
    Endpoint(
        "GET", "/api/queues/{queue}/keys", "keys",
        "A queue's concurrency keys with queued or active jobs, busiest first (key null: "
        "its jobs without one), and its per-key limits",
        json_response(KEYS, "the keys"),
        parameters=[query("limit", {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT},
                          "at most this many keys (default 50)")],
    ),
    Endpoint(
        "GET", "/api/queues/{queue}/dead", "dead",
        "The dead-letter queue: a page, newest first, and counts by dead_reason",
        json_response(page(counts_by_reason=COUNTS), "a page of dead jobs"), parameters=PAGING,
    ),
    Endpoint(
        "POST", "/api/queues/{queue}/dead/retry", "retry_dead",
        "Requeue dead jobs (the ids given, or all) with their budgets reset; "
        "by: who asks, for their retried events",
        json_response(closed_object(retried={"type": "integer"}), "how many"), errors=WITH_BODY,
        body={**SELECTION, "properties": {
            **SELECTION_FIELDS, "by": {"type": "string", "enum": ["api", "dashboard"]}}},
    ),
    Endpoint(
        "POST", "/api/queues/{queue}/dead/purge", "purge_dead",
        "Delete dead jobs for good; confirm must repeat the queue's name",
        json_response(closed_object(purged={"type": "integer"}), "how many"), errors=WITH_BODY,
        body={**SELECTION, "properties": {**SELECTION_FIELDS, "confirm": NAME},
              "required": ["confirm"]},
    ),
    Endpoint(
        "GET", "/api/jobs", "jobs", "Jobs, newest first, by queue and state",
        json_response(page(), "a page"),
        parameters=[query("queue", NAME, "only this queue"),
                    query("state", type_schema(State), "only this state"), *PAGING],
    ),
    Endpoint(
        "POST", "/api/jobs", "enqueue", "Enqueue a job of a task, by name", A_JOB,
        errors=WITH_BODY, body=ref("NewJob"), created=True,
    ),
    Endpoint(
        "GET", "/api/jobs/{id}", "job", "A job with its history of attempts", A_JOB,
        errors=(404,),
    ),
    Endpoint(
        "POST", "/api/jobs/{id}/cancel", "cancel",
        "Cancel a scheduled or queued job; stop an active one's attempt",
        json_response({"anyOf": [ref("Job"), ref("Workflow")]},
                      "the job, cancelled (or cancel_requested); of a workflow's id, the "
                      "workflow, as POST /api/workflows/{workflow}/cancel answers"),
        errors=(404, 409),
    ),
    Endpoint(
        "POST", "/api/workflows", "enqueue_workflow",
        "Start a workflow: steps in chains and groups; with a key, the running one of that key",
        A_WORKFLOW, errors=WITH_BODY, body=ref("NewWorkflow"), created=True,
    ),
    Endpoint(
        "GET", "/api/workflows/{workflow}", "workflow", "A workflow, its state and its steps",
        A_WORKFLOW, errors=(404,),
    ),
    Endpoint(
        "POST", "/api/workflows/{workflow}/cancel", "cancel_workflow",
        "Cancel a workflow: each unfinished step, as a job's cancel does (a completed one "
        "stays as it is)",
        A_WORKFLOW, errors=(404,),
    ),
    Endpoint(
        "GET", "/api/workers", "workers", "Registered workers, with the leases each holds",
        json_response(closed_object(workers={"type": "array", "items": ref("Worker")}),
                      "the workers"),
    ),
    Endpoint(
        "GET", "/metrics", "metrics", "Prometheus metrics: jobs by queue and state, queue lag",
        text_response("text/plain", "the text exposition format"),
    ),
    Endpoint(
        "GET", "/api/events", "events",
        "Lifecycle events as server-sent events; resumes after Last-Event-ID",
        text_response("text/event-stream",
                      "an endless stream: `id:` the event's id, `data:` an Event"),
        parameters=EVENTS_FROM,
        # Past MAX_STREAMS open streams (tenure.web.sse), another is refused.
        notes={503: "storage unavailable, or too many event streams open (TooManyStreams)"},
    ),
)  # fmt: skip
