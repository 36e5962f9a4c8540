"""A mkdocs hook: the HTTP API reference, generated from its OpenAPI document.

The page is rendered from ``tenure.web.openapi.document()``, the document that
``tenure serve`` serves at ``/api/openapi.json``: every path and method, its
parameters, request body and responses, then every schema as a table of
fields. Nothing on it is written by hand but the introduction, so an
operation the document has cannot be missing from the page.

The document is also checked against the server it describes: the API routes
of ``tenure.web.asgi_app`` (built over an App on a temporary SQLite file;
nothing is served) must be the document's operations, one for one. A route
without an operation, or an operation without a route, is a warning, which
``mkdocs build --strict`` turns into a failed build; so is a schema construct
this page does not know how to show.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections import Counter
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from tenure.config import MAX_SECONDS

HTTP_PAGE = "reference/http.md"
METHODS = ("get", "put", "post", "delete", "patch")
SCHEMA_REF = re.compile(r"^#/components/schemas/(\w+)$")
log = logging.getLogger("mkdocs.hooks.http_reference")

INTRO = """# HTTP API

Generated, when the site is built, from the OpenAPI {version} document that
`tenure serve` serves at `/api/openapi.json` (`tenure.web.openapi`): what the
server answers is what this page says, and schemathesis checks the server
against the same document (`tests/web/test_openapi.py`). For the dashboard,
live events and deployment behind a proxy, see
[the dashboard and HTTP API](../serve.md).

Paths are relative to the server's root: `http://127.0.0.1:8787` by default,
under the `--root-path` prefix if one is set, or under your own `Mount` when
`tenure.web.asgi_app` is mounted in your ASGI app. The document itself is
`GET /api/openapi.json`, behind the same guard as every other path.

## Authentication

Every path is behind one guard (`tenure.web.guard`); the security schemes of
the document are {schemes}:

- **No token** (`tenure serve` on loopback, the default): the server answers
  only requests addressed to a loopback host (`Host: localhost`,
  `127.0.0.1` or `[::1]`), and 403 to any other, so a page of another site
  that rebinds its own name to 127.0.0.1 gets nothing. `tenure serve` refuses
  to listen on another address without a token.
- **A token** (`TENURE_TOKEN` or `--token-file`): every request needs it,
  as `Authorization: Bearer <token>` or as the session cookie that the
  dashboard's `/login` form sets; 401 otherwise. After {failures} wrong tokens
  within {window:g} s from one address, every token attempt from it gets 429 with
  `Retry-After`.
- **Requests that change something** (`PUT`, `POST`) sent by a browser must
  come from the server's own pages (`Sec-Fetch-Site`, `Origin`), else 403;
  one that carries the bearer header is exempt. Bodies are
  `application/json` (415 otherwise), at most the App's `max_payload` plus
  64 KiB (413 otherwise).

The full security model: [serve.md](../serve.md#security-model).

## Errors

Every error is a JSON [`Error`](#schema-error): `{{"error": <kind>,
"message": <what to do>}}` (`InvalidInput`, `JobNotFound`, `Unauthorized`…),
with a 4xx status, or 503 when storage cannot be reached; never a 500 for bad
input. Any operation may answer:

"""
OPERATIONS = """| method | path | what it does |
| --- | --- | --- |
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(value: Any) -> str:
    text = "true" if value is True else "false" if value is False else str(value)
    return f"`{text}`"


def _anchor(method: str, path: str) -> str:
    return "op-" + method + "-" + "-".join(re.findall(r"\w+", path))


def _schema_name(ref: str) -> str:
    match = SCHEMA_REF.match(ref)
    if match is None:
        log.warning("unknown $ref %r in the OpenAPI document", ref)
        return ref
    return match[1]


def kind(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, with a link for a named schema."""
    if "$ref" in schema:
        name = _schema_name(schema["$ref"])
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        return "; or ".join(kind(s) for s in schema["anyOf"])
    if "enum" in schema:
        values = [_code(v) for v in schema["enum"]]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    types = schema.get("type")
    if types is None:
        return "any JSON value"
    names = types if isinstance(types, list) else [types]
    words = []
    for name in names:
        if name == "array":
            words.append("array of " + kind(schema.get("items", {})))
        elif name == "object" and isinstance(schema.get("additionalProperties"), dict):
            keys = schema.get("propertyNames", {}).get("enum")
            key = "a state" if keys else "string"
            words.append(f"object: {key} → {kind(schema['additionalProperties'])}")
        else:
            words.append(name)
    return " or ".join(words)


def number(x: float) -> str:
    if x == MAX_SECONDS:
        return "ten years"
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def value_range(schema: dict[str, Any]) -> str:
    """``lo to hi``, ``above lo to hi``, ``≥ lo``… as the schema's minimum and maximum say."""
    above = "exclusiveMinimum" in schema
    lo = schema.get("exclusiveMinimum", schema.get("minimum"))
    hi = schema.get("maximum")
    if lo is not None and hi is not None:
        return f"{'above ' if above else ''}{number(lo)} to {number(hi)}"
    if lo is not None:
        return f"{'>' if above else '≥'} {number(lo)}"
    return "" if hi is None else f"≤ {number(hi)}"


def bounds(schema: dict[str, Any]) -> str:
    """A schema's constraints in words: lengths, ranges, pattern, items."""
    parts = []
    if "pattern" in schema:
        parts.append(f"matches `{schema['pattern']}`")
    if "minLength" in schema or "maxLength" in schema:
        parts.append(f"{schema.get('minLength', 0)} to {schema.get('maxLength', '…')} characters")
    if text := value_range(schema):
        parts.append(text)
    if "minItems" in schema:
        parts.append(f"at least {schema['minItems']} item(s)")
    keys = schema.get("propertyNames", {}).get("enum")
    if keys:
        parts.append("keys: " + ", ".join(_code(k) for k in keys))
    items = schema.get("items")
    if isinstance(items, dict) and (inner := bounds(items)):
        parts.append("each " + inner)
    return "; ".join(parts)


def field_rows(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """One row per field of an object schema; the fields of an inline object
    (or of an array's inline objects) follow, as ``outer.inner`` (``outer[].inner``)."""
    required = set(schema.get("required", ()))
    rows = []
    for name, sub in schema.get("properties", {}).items():
        cells = [f"`{prefix}{name}`", kind(sub), "yes" if name in required else "no", bounds(sub)]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if "properties" in sub:
            rows += field_rows(sub, f"{prefix}{name}.")
        elif "properties" in sub.get("items", {}):
            rows += field_rows(sub["items"], f"{prefix}{name}[].")
    return rows


def object_text(schema: dict[str, Any]) -> list[str]:
    """An object schema as a table of its fields and a line of its rules."""
    if "properties" not in schema:
        return [f"{kind(schema)}" + (f" ({b})" if (b := bounds(schema)) else ""), ""]
    lines = ["| field | type | required | bounds |", "| --- | --- | --- | --- |"]
    lines += field_rows(schema)
    rules = []
    if one_of := schema.get("oneOf"):
        choices = [" and ".join(f"`{n}`" for n in alt.get("required", ())) for alt in one_of]
        rules.append("Exactly one of " + " or ".join(choices) + ".")
    if schema.get("additionalProperties") is False:
        rules.append("No other field.")
    unknown = set(schema) - {"type", "properties", "required", "additionalProperties", "oneOf"}
    if unknown:
        log.warning("the HTTP reference does not show %s of an object schema", sorted(unknown))
    lines += ["", " ".join(r for r in rules if r), ""]
    return lines


def content_of(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(media, spec)] = body["content"].items()
    return media, spec.get("schema", {})


def common_errors(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The responses that every operation has, each as most operations describe it."""
    ops = [op for item in doc["paths"].values() for m, op in item.items() if m in METHODS]
    statuses = set.intersection(*(set(op["responses"]) for op in ops))
    common = {}
    for status in sorted(statuses):
        seen = Counter(json.dumps(op["responses"][status], sort_keys=True) for op in ops)
        common[status] = json.loads(seen.most_common(1)[0][0])
    return common


def responses_table(responses: dict[str, Any]) -> tuple[list[str], list[tuple[str, Any]]]:
    """A table of responses, and the inline object bodies to show under it."""
    lines = ["| status | when | body |", "| --- | --- | --- |"]
    inline = []
    for status, response in sorted(responses.items()):
        media, schema = content_of(response)
        if "properties" in schema:
            shape = "below"
            inline.append((status, schema))
        else:
            shape = kind(schema)
        cells = [status, response["description"], f"`{media}`: {shape}"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines, inline


def operation_text(
    method: str, path: str, op: dict[str, Any], shared: list[Any], common: dict[str, Any]
) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{ #{_anchor(method, path)} }}", "",
             op["summary"] + ".", ""]  # fmt: skip
    if description := op.get("description"):
        lines += [description, ""]
    unknown = set(op) - {"summary", "description", "parameters", "requestBody", "responses"}
    if unknown:
        log.warning("the HTTP reference does not show %s of %s %s", sorted(unknown), method, path)
    params = [*shared, *op.get("parameters", ())]
    if params:
        lines += ["| parameter | in | type | required | bounds | what it is |",
                  "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for p in params:
            schema = p.get("schema", {})
            cells = [f"`{p['name']}`", p["in"], kind(schema), "yes" if p.get("required") else "no",
                     bounds(schema), p.get("description", "")]  # fmt: skip
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    if body := op.get("requestBody"):
        media, schema = content_of(body)
        needed = "required" if body.get("required") else "optional"
        lines += [f"**Request body** (`{media}`, {needed}):", ""]
        lines += object_text(schema)
    own = {s: r for s, r in op["responses"].items() if common.get(s) != r}
    table, inline = responses_table(own)
    also = ", ".join(s for s in common if common[s] == op["responses"][s])
    lines += [*table, f"| {also} | [the errors of every operation](#errors) | |", ""]
    for status, schema in inline:
        lines += [f"**{status} body**:", "", *object_text(schema)]
    return lines


def http_page() -> str:
    from tenure.web.openapi import document

    doc = document()
    check_routes(doc)
    schemes = doc["components"].get("securitySchemes", {})
    names = [f"`{n}` ({s['type']} {s.get('scheme', '')})".replace(" )", ")")
             for n, s in schemes.items()]  # fmt: skip
    none = [] if {} not in doc.get("security", []) else ["none"]
    listed = " or ".join(none + names) or "none"
    from tenure.web.guard import LOGIN_FAILURES, LOGIN_WINDOW

    text = INTRO.format(version=doc["openapi"], schemes=listed, failures=LOGIN_FAILURES,
                        window=LOGIN_WINDOW)  # fmt: skip
    common = common_errors(doc)
    errors, _ = responses_table(common)
    text += "\n".join(errors) + "\n\n## Operations\n\n" + OPERATIONS
    table, sections = [], []
    for path, item in doc["paths"].items():
        shared = item.get("parameters", [])
        for method in METHODS:
            if op := item.get(method):
                link = f"[`{path}`](#{_anchor(method, path)})"
                table.append(f"| {method.upper()} | {link} | {_cell(op['summary'])} |")
                sections += operation_text(method, path, op, shared, common)
        unknown = set(item) - {"parameters", *METHODS}
        if unknown:
            log.warning("the HTTP reference does not show %s of path %s", sorted(unknown), path)
    schemas = ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        schemas += [f"### {name} {{ #schema-{name.lower()} }}", "", *object_text(schema)]
        if name == "Policy":
            schemas += ["What each field does: [the queue policy](policy.md).", ""]
    return text + "\n".join(table) + "\n\n## Paths\n\n" + "\n".join(sections + schemas) + "\n"


def check_routes(doc: dict[str, Any]) -> None:
    """Warn when the server's API routes and the document's operations differ."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    import tenure
    from tenure.web import asgi_app
    from tenure.web.guard import Guard

    documented = {(m.upper(), p) for p, item in doc["paths"].items() for m in item
                  if m in METHODS}  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        app = tenure.App(f"sqlite:///{directory}/tenure.db")
        try:
            server = asgi_app(app)
            assert isinstance(server, Guard) and isinstance(server.inner, Starlette)
            routes = server.inner.routes
        finally:
            app.close()
    api = [r for r in routes if isinstance(r, Route)
           and (r.path.startswith("/api/") or r.path == "/metrics")
           and r.path != "/api/openapi.json"]  # fmt: skip
    served = {(m, r.path) for r in api for m in r.methods or () if m != "HEAD"}
    for method, path in sorted(served - documented):
        log.warning("%s %s is served but not in the OpenAPI document (tenure/web/openapi.py)",
                    method, path)  # fmt: skip
    for method, path in sorted(documented - served):
        log.warning("%s %s is in the OpenAPI document but not served", method, path)


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, HTTP_PAGE, content=http_page()))
    return files


if __name__ == "__main__":  # print the page, to read it without building the site
    print(http_page())
