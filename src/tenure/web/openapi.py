"""The API's OpenAPI document, served at ``/api/openapi.json``: generated from
the endpoints' declaration (``tenure.web.endpoints``) and the schemas derived
from tenure's dataclasses (``tenure.web.schemas``)."""

from __future__ import annotations

from typing import Any

from tenure.web.endpoints import ENDPOINTS, Endpoint, json_response, path_parameters
from tenure.web.schemas import components, ref

# What any endpoint may answer besides its own, and what each error status means.
COMMON_ERRORS = (400, 401, 403, 429, 503)
ERRORS = {
    400: "bad input",
    401: "no token",
    403: "refused (cross-site, or not localhost)",
    404: "no such job (or workflow)",
    409: "not in a state that allows it",
    413: "body too large",
    415: "body not JSON",
    429: "too many wrong tokens from this address; Retry-After says when to try again",
    503: "storage unavailable",
}


def operation(endpoint: Endpoint) -> dict[str, Any]:
    """The OpenAPI operation of ``endpoint``."""
    responses = {"201" if endpoint.created else "200": endpoint.ok}
    for code in (*COMMON_ERRORS, *endpoint.errors):
        text = endpoint.notes.get(code, ERRORS[code])
        responses[str(code)] = json_response(ref("Error"), text)
    op: dict[str, Any] = {"summary": endpoint.summary, "responses": responses}
    if endpoint.parameters:
        op["parameters"] = endpoint.parameters
    if endpoint.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": endpoint.body}},
        }
    return op


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        if endpoint.path not in paths:
            shared = path_parameters(endpoint.path)
            paths[endpoint.path] = {"parameters": shared} if shared else {}
        paths[endpoint.path][endpoint.method.lower()] = operation(endpoint)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tenure",
            "version": "1",
            "description": "A job queue in which a job is never silently lost.",
        },
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"token": []}],
    }
