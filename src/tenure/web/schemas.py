"""The JSON schemas of what the API reads and returns, for its OpenAPI document.

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
from tenure.config import POLICY_BOUNDS, QueuePolicy, policy_fields
from tenure.core.events import Event, EventKind
from tenure.core.names import (
    CONCURRENCY_KEY_MAX_LENGTH,
    DOT_SEGMENTS,
    JOB_ID_MAX_LENGTH,
    NAME_PATTERN,
)
from tenure.core.states import State
from tenure.core.workflows import Workflow
from tenure.formats import KEY_LIMITS
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
        return ref(hint.__name__)
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
    # Job is only a type-checking import of core (which may not import job.py).
    hints = typing.get_type_hints(cls, localns={"Job": Job})
    props = {f.name: type_schema(hints[f.name]) for f in dataclasses.fields(cls)}
    props.update(extra)
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(props)
    return schema


def policy_schema(required: bool) -> dict[str, Any]:
    """A queue's policy; not ``required``: some of its fields, as a change."""
    schema = object_schema(QueuePolicy, required=required)
    for f in policy_fields():  # the field's own docstring, as the policy editor shows it
        schema["properties"][f.name]["description"] = f.doc
    for name, (lo, hi) in POLICY_BOUNDS.items():
        prop = schema["properties"][name]
        prop.update(minimum=lo, maximum=hi)
        if name == "timeout":
            prop["exclusiveMinimum"] = prop.pop("minimum")
    return schema


def ref(name: str) -> dict[str, Any]:
    """A schema of ``COMPONENTS``, by name."""
    return {"$ref": f"#/components/schemas/{name}"}


def closed_object(**props: Any) -> dict[str, Any]:
    """An object with exactly these fields, all required."""
    return {
        "type": "object",
        "required": list(props),
        "additionalProperties": False,
        "properties": props,
    }


def page(**extra: Any) -> dict[str, Any]:
    """A page of jobs, newest first, with ``extra`` fields."""
    return closed_object(
        jobs={"type": "array", "items": ref("Job")},
        next_cursor={"type": ["string", "null"]},
        **extra,
    )


NAME = {
    "type": "string",
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "not": {"enum": sorted(DOT_SEGMENTS)},
}
JOB_ID = {"type": "string", "minLength": 1, "maxLength": JOB_ID_MAX_LENGTH}
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
QUEUE_ROW = closed_object(
    name={"type": "string"}, counts=STATE_COUNTS, lag={"type": "number", "minimum": 0}
)


NEW_JOB_FIELDS = {
    "task": NAME,
    "args": {"type": ["object", "null"]},
    "queue": NAME,
    "delay": {"type": "number", "minimum": 0},
    "run_at": {"type": "number"},
    "priority": {"type": "integer"},
    "key": {"type": ["string", "null"]},
    "max_attempts": {"type": ["integer", "null"], "minimum": 1},
    "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0},
    "concurrency_key": {"type": ["string", "null"], "minLength": 1,
                        "maxLength": CONCURRENCY_KEY_MAX_LENGTH},
    "debounce": {"type": ["number", "null"], "exclusiveMinimum": 0},
    "unique_for": {"type": ["number", "null"], "exclusiveMinimum": 0},
}  # fmt: skip
# What a workflow's step does not take (tenure.flows.STEP_FIELDS): a key's windows.
_NOT_IN_STEPS = ("key", "debounce", "unique_for")
KEY_ROW = closed_object(
    key={"type": ["string", "null"]},
    queued={"type": "integer", "minimum": 0},
    active={"type": "integer", "minimum": 0},
)
KEYS = closed_object(
    queue={"type": "string"},
    limits=closed_object(**{name: policy_schema(required=True)["properties"][name]
                            for name in KEY_LIMITS}),
    keys={"type": "array", "items": KEY_ROW},
)  # fmt: skip


def _flow_schemas() -> dict[str, Any]:
    """A flow as ``tenure.flows.flow_from_json`` reads it: a step (a job's
    fields without key, and may_fail), a chain or a group of flows."""
    step_fields = {k: v for k, v in NEW_JOB_FIELDS.items() if k not in _NOT_IN_STEPS}
    parts = {"type": "array", "minItems": 1, "items": ref("Flow")}
    return {
        "FlowStep": {
            "type": "object",
            "required": ["task"],
            "additionalProperties": False,
            "properties": {**step_fields, "may_fail": {"type": "boolean"}},
        },
        "Flow": {
            "anyOf": [ref("FlowStep"), closed_object(chain=parts), closed_object(group=parts)]
        },
        "NewWorkflow": {
            "type": "object",
            "required": ["flow"],
            "additionalProperties": False,
            "properties": {"flow": ref("Flow"), "key": {"type": ["string", "null"]}},
        },
    }


def components() -> dict[str, Any]:
    """The document's named schemas, which ``ref`` points to."""
    return {
        "Job": object_schema(Job),
        "Workflow": object_schema(Workflow),
        **_flow_schemas(),
        "Attempt": object_schema(Attempt),
        "Worker": object_schema(WorkerInfo),
        "Policy": policy_schema(required=True),
        "Event": object_schema(Event, kind=type_schema(EventKind)),
        "NewJob": {
            "type": "object",
            "required": ["task"],
            "additionalProperties": False,
            "properties": NEW_JOB_FIELDS,
        },
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
        },
    }


__all__ = [
    "COUNTS",
    "JOB_ID",
    "KEYS",
    "NAME",
    "QUEUE_ROW",
    "SELECTION",
    "SELECTION_FIELDS",
    "closed_object",
    "components",
    "object_schema",
    "page",
    "policy_schema",
    "ref",
    "type_schema",
]
