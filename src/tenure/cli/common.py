"""What the commands share: the App of one invocation, errors and argument types."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import orjson

from tenure.app import App
from tenure.backends.factory import resolve_url
from tenure.backends.sqlite.backend import path_of_url


class CliError(click.ClickException):
    """An error the user can act on: one line on stderr, exit code 1."""

    exit_code = 1


@dataclass
class CliState:
    """The root context's object: the backend URL, and the App once opened."""

    url: str
    app: App | None = None


def open_app(*, create: bool = False, write: bool = False) -> App:
    """The App of this invocation, opened on first use and closed when the command ends.
    Only a command that stores something (``create``) may create a SQLite database:
    any other one, given a path where there is none (a typo), says so instead. Only
    a command that writes (``write``, or ``create``) may migrate one: the others
    open it read-only, so that a user who may only read it can run them."""
    root = click.get_current_context().find_root()
    state = root.find_object(CliState)
    assert state is not None, "the tenure group sets its CliState"
    write = write or create
    if state.app is None:
        if not create:
            _check_sqlite_file(state.url)
        state.app = root.with_resource(App(state.url, read_only=not write))
    assert not (write and state.app.read_only), "a command that writes opens its App so first"
    return state.app


def _check_sqlite_file(url: str) -> None:
    url = resolve_url(url)
    if urlsplit(url).scheme.lower() != "sqlite":
        return
    path = path_of_url(url)
    if path != ":memory:" and not Path(path).exists():
        raise CliError(
            f"SQLite database {path} does not exist (check --url or TENURE_URL); "
            "nothing was created"
        )


def json_object(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, Any]:
    """Option callback: a JSON object given on the command line, e.g. ``'{"to": "a@x"}'``."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", ctx, param) from None
    if not isinstance(data, dict):
        raise click.BadParameter(
            f'must be a JSON object such as \'{{"to": "a@example.com"}}\', '
            f"got a JSON {type(data).__name__}",
            ctx,
            param,
        )
    return data


def parse_value(raw: str) -> Any:
    """A value from the command line: JSON when it parses as JSON, else the string itself."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
