"""JSON in and out: one encoder, one error shape, bodies read within a limit."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from tenure.core.names import shown
from tenure.errors import InvalidInput

# In orjson's output these bytes occur only inside strings, where their \u
# escapes mean the same: a value never reads as markup, even where a careless
# client puts a response into a page.
_ESCAPES = ((b"&", b"\\u0026"), (b"<", b"\\u003c"), (b">", b"\\u003e"))


class JSON(Response):
    """A JSON response, encoded by orjson (enums as their values, any key type)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def dumps(value: Any) -> bytes:
    """``value`` as JSON, with ``&<>`` escaped."""
    data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    for raw, escaped in _ESCAPES:
        data = data.replace(raw, escaped)
    return data


def error_response(status: int, error: str, message: str) -> JSON:
    """The one error shape: ``{"error": <kind>, "message": <what to do>}``."""
    return JSON({"error": error, "message": message}, status)


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body; 413 past ``limit`` bytes, without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
    return bytes(body)


async def json_object(request: Request, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object ({} when empty); InvalidInput otherwise."""
    body = await read_body(request, limit)
    if not body.strip():
        return {}
    if request.headers.get("content-type", "").partition(";")[0].strip() != "application/json":
        raise HTTPException(415, "send the body as Content-Type: application/json")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"the body must be a JSON object, got {shown(data)}")
    return data
