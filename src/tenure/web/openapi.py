"""The API's OpenAPI document, served at ``/api/openapi.json``.

The shapes of jobs, attempts, workers and policies are derived from their
dataclasses, so that the document cannot drift from what the API returns
(schemathesis checks every response against it).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any

from tenure.backends.base import WorkerInfo
from tenure.backends.checks import LIST_LIMIT
from tenure.config import MAX_SECONDS, POLICY_BOUNDS, QueuePolicy, policy_fields
from tenure.core.events import Event, EventKind
from tenure.core.names import DOT_SEGMENTS, JOB_ID_MAX_LENGTH, NAME_PATTERN
from tenure.core.states import State
from tenure.job import Attempt, Job

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Any: {},
}


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a field's type, as orjson renders it."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if isinstance(hint, type) and issubclass(hint, Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _ref(hint.__name__)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"no schema for {hint}")
        inner = type_schema(rest[0])
        if "$ref" in inner or "enum" in inner:
            return {"anyOf": [inner, {"type": "null"}]}
        return {**inner, "type": [inner["type"], "null"]} if inner else {}
    if origin is typing.Literal:
        return {"type": "string", "enum": list(args)}
    if origin is dict:
        return {"type": "object"}
    if origin in (tuple, list):
        return {"type": "array", "items": type_schema(args[0])}
    raise TypeError(f"no schema for {hint}")


def object_schema(cls: type, *, required: bool = True, **extra: Any) -> dict[str, Any]:
    """The schema of a dataclass as ``dataclasses.asdict`` renders it."""
    hints = typing.get_type_hints(cls)
    props = {f.name: type_schema(hints[f.name]) for f in dataclasses.fields(cls)}
    props.update(extra)
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(props)
    return schema


def _policy_fields(required: bool) -> dict[str, Any]:
    schema = object_schema(QueuePolicy, required=required)
    for f in policy_fields():  # the field's own docstring, as the policy editor shows it
        schema["properties"][f.name]["description"] = f.doc
    for name, (lo, hi) in POLICY_BOUNDS.items():
        prop = schema["properties"][name]
        prop.update(minimum=lo, maximum=hi)
        if name == "timeout":
            prop["exclusiveMinimum"] = prop.pop("minimum")
    return schema


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "bad input",
        401: "no token",
        403: "refused (cross-site, or not localhost)",
        404: "no such job",
        409: "not in a state that allows it",
        413: "body too large",
        415: "body not JSON",
        429: "too many wrong tokens from this address; Retry-After says when to try again",
        503: "storage unavailable",
    }
    return {str(c): _json(_ref("Error"), text[c]) for c in (400, 401, 403, 429, 503, *codes)}


def _op(summary: str, ok: dict[str, Any], *codes: int, **more: Any) -> dict[str, Any]:
    status = "201" if more.pop("created", False) else "200"
    return {"summary": summary, "responses": {status: ok, **_errors(*codes)}, **more}


def _param(where: str, name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",  # a path's parameters always are
        "schema": schema,
        "description": description,
    }


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return _param("query", name, schema, description)


def _path(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return _param("path", name, schema, description)


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


NAME = {
    "type": "string",
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "not": {"enum": sorted(DOT_SEGMENTS)},
}
JOB_ID = {"type": "string", "minLength": 1, "maxLength": JOB_ID_MAX_LENGTH}
QUEUE = _path("queue", NAME, "the queue's name")
PAGING = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT}, "page size"),
    _query("after", {"type": "string"}, "the next_cursor of the previous page"),
]
SELECTION_FIELDS = {
    "ids": {"type": "array", "items": JOB_ID, "minItems": 1},
    "all": {"type": "boolean", "enum": [True]},
}
SELECTION = {
    "type": "object",
    "properties": SELECTION_FIELDS,
    "additionalProperties": False,
    "oneOf": [{"required": ["ids"]}, {"required": ["all"]}],
}
COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
STATE_COUNTS = {**COUNTS, "propertyNames": {"enum": [s.value for s in State]}}


def _page(**extra: Any) -> dict[str, Any]:
    props = {
        "jobs": {"type": "array", "items": _ref("Job")},
        "next_cursor": {"type": ["string", "null"]},
        **extra,
    }
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    queue = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "counts", "lag"],
        "properties": {
            "name": {"type": "string"},
            "counts": STATE_COUNTS,
            "lag": {"type": "number", "minimum": 0},
        },
    }
    paths: dict[str, Any] = {
        "/api/queues": {
            "get": _op(
                "Queues, with their jobs counted by state",
                _json(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["storage", "queues"],
                        "properties": {
                            "storage": {"type": "string"},
                            "queues": {"type": "array", "items": queue},
                        },
                    },
                    "the queues",
                ),
            )
        },
        "/api/queues/{queue}/policy": {
            "parameters": [QUEUE],
            "get": _op("A queue's policy", _json(_ref("Policy"), "the policy")),
            "put": _op(
                "Change fields of a queue's policy; the others stay",
                _json(_ref("Policy"), "the policy stored"),
                413,
                415,
                requestBody=_body(_policy_fields(required=False)),
            ),
        },
        "/api/queues/{queue}/dead": {
            "parameters": [QUEUE],
            "get": _op(
                "The dead-letter queue: a page, newest first, and counts by dead_reason",
                _json(_page(counts_by_reason=COUNTS), "a page of dead jobs"),
                parameters=PAGING,
            ),
        },
        "/api/queues/{queue}/dead/retry": {
            "parameters": [QUEUE],
            "post": _op(
                "Requeue dead jobs (the ids given, or all) with their budgets reset; "
                "by: who asks, for their retried events",
                _json(
                    {
                        "type": "object",
                        "required": ["retried"],
                        "additionalProperties": False,
                        "properties": {"retried": {"type": "integer"}},
                    },
                    "how many",
                ),
                413,
                415,
                requestBody=_body(
                    {
                        **SELECTION,
                        "properties": {
                            **SELECTION_FIELDS,
                            "by": {"type": "string", "enum": ["api", "dashboard"]},
                        },
                    }
                ),
            ),
        },
        "/api/queues/{queue}/dead/purge": {
            "parameters": [QUEUE],
            "post": _op(
                "Delete dead jobs for good; confirm must repeat the queue's name",
                _json(
                    {
                        "type": "object",
                        "required": ["purged"],
                        "additionalProperties": False,
                        "properties": {"purged": {"type": "integer"}},
                    },
                    "how many",
                ),
                413,
                415,
                requestBody=_body(
                    {
                        **SELECTION,
                        "properties": {**SELECTION_FIELDS, "confirm": NAME},
                        "required": ["confirm"],
                    }
                ),
            ),
        },
        "/api/jobs": {
            "get": _op(
                "Jobs, newest first, by queue and state",
                _json(_page(), "a page"),
                parameters=[
                    _query("queue", NAME, "only this queue"),
                    _query("state", type_schema(State), "only this state"),
                    *PAGING,
                ],
            ),
            "post": _op(
                "Enqueue a job of a task, by name",
                _json(_ref("Job"), "the job"),
                413,
                415,
                created=True,
                requestBody=_body(_ref("NewJob")),
            ),
        },
        "/api/jobs/{id}": {
            "parameters": [_path("id", JOB_ID, "the job's id")],
            "get": _op("A job with its history of attempts", _json(_ref("Job"), "the job"), 404),
        },
        "/api/jobs/{id}/cancel": {
            "parameters": [_path("id", JOB_ID, "the job's id")],
            "post": _op(
                "Cancel a scheduled or queued job; stop an active one's attempt",
                _json(_ref("Job"), "the job, cancelled (or cancel_requested)"),
                404,
                409,
            ),
        },
        "/api/workers": {
            "get": _op(
                "Registered workers, with the leases each holds",
                _json(
                    {
                        "type": "object",
                        "required": ["workers"],
                        "additionalProperties": False,
                        "properties": {"workers": {"type": "array", "items": _ref("Worker")}},
                    },
                    "the workers",
                ),
            )
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics: jobs by queue and state, queue lag",
                {
                    "description": "the text exposition format",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
            )
        },
        "/api/events": {
            "get": _op(
                "Lifecycle events as server-sent events; resumes after Last-Event-ID",
                {
                    "description": "an endless stream: `id:` the event's id, `data:` an Event",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                parameters=[
                    _query("queue", NAME, "only this queue"),
                    _query("after", {"type": "string"}, "start after this event id"),
                    _query(
                        "since",
                        {"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
                        "without after: start with the events of the last this many "
                        "seconds (storage's clock)",
                    ),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "the last event id seen (a reconnecting EventSource "
                        "sends it); wins over after",
                    },
                ],
            )
        },
    }
    # Past MAX_STREAMS open streams (tenure.web.sse), another is refused.
    paths["/api/events"]["get"]["responses"]["503"] = _json(
        _ref("Error"), "storage unavailable, or too many event streams open (TooManyStreams)"
    )
    schemas = {
        "Job": object_schema(Job),
        "Attempt": object_schema(Attempt),
        "Worker": object_schema(WorkerInfo),
        "Policy": _policy_fields(required=True),
        "Event": object_schema(Event, kind=type_schema(EventKind)),
        "NewJob": {
            "type": "object",
            "required": ["task"],
            "additionalProperties": False,
            "properties": {
                "task": NAME,
                "args": {"type": ["object", "null"]},
                "queue": NAME,
                "delay": {"type": "number", "minimum": 0},
                "run_at": {"type": "number"},
                "priority": {"type": "integer"},
                "key": {"type": ["string", "null"]},
                "max_attempts": {"type": ["integer", "null"], "minimum": 1},
                "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0},
            },
        },
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tenure",
            "version": "1",
            "description": "A job queue in which a job is never silently lost.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"token": []}],
    }
