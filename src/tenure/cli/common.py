"""What the commands share: the App of one invocation, errors and argument types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import orjson

from tenure.app import App
from tenure.backends.checks import LIST_LIMIT
from tenure.backends.factory import resolve_url
from tenure.config import DEFAULT_MAX_PAYLOAD, DEFAULT_URL
from tenure.errors import InvalidInput


class CliError(click.ClickException):
    """An error the user can act on: one line on stderr, exit code 1."""

    exit_code = 1


@dataclass
class CliState:
    """The root context's object: where the URL comes from, and the App once opened.

    The URL: ``--url``, else ``TENURE_URL``, else the url of the App that
    ``--app`` (``TENURE_APP``) names, else the default ``sqlite:///tenure.db``.
    """

    given_url: str | None  # from --url or TENURE_URL
    given_by: str | None  # which of them
    app_path: str | None = None  # --app or TENURE_APP
    app: App | None = None  # opened for this invocation
    _loaded: App | None = None

    def loaded(self) -> App | None:
        """The App ``--app`` names, imported once; None without ``--app``."""
        if self._loaded is None and self.app_path is not None:
            from tenure import loader

            try:
                self._loaded = loader.load_app(self.app_path)
            except InvalidInput as exc:
                raise CliError(f"--app: {exc}") from None
        return self._loaded

    @property
    def url(self) -> str:
        if self.given_url is not None:
            return self.given_url
        loaded = self.loaded()
        return loaded.url if loaded is not None else DEFAULT_URL

    @property
    def url_origin(self) -> str:
        """Where the URL comes from, for a reader."""
        if self.given_by is not None:
            return self.given_by
        return f"the App {self.app_path}" if self.loaded() is not None else "the default"


def cli_state() -> CliState:
    state = click.get_current_context().find_root().find_object(CliState)
    assert state is not None, "the tenure group sets its CliState"
    return state


def open_app(*, create: bool = False, write: bool = False) -> App:
    """The App of this invocation, opened on first use and closed when the command ends.
    Only a command that stores something (``create``) may create a SQLite database:
    any other one, given a path where there is none (a typo), says so instead. Only
    a command that writes (``write``, or ``create``) may migrate one: the others
    open it read-only, so that a user who may only read it can run them. With
    ``--app``, the App's tasks (their defaults, their parameters) apply too."""
    root = click.get_current_context().find_root()
    state = cli_state()
    write = write or create
    if state.app is None:
        url = state.url
        if not create:
            _check_sqlite_file(url)
        loaded = state.loaded()
        max_payload = loaded.max_payload if loaded is not None else DEFAULT_MAX_PAYLOAD
        app = App(url, read_only=not write, max_payload=max_payload)
        if loaded is not None:
            app.tasks, app.schedules = loaded.tasks, loaded.schedules
        state.app = root.with_resource(app)
    assert not (write and state.app.read_only), "a command that writes opens its App so first"
    return state.app


def _check_sqlite_file(url: str) -> None:
    url = resolve_url(url)
    if urlsplit(url).scheme.lower() != "sqlite":
        return
    from tenure.backends.sqlite.url import path_of_url  # a server's commands need none of it

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


F = TypeVar("F", bound=Callable[..., Any])


def limit_option(help: str = "Page size.") -> Callable[[F], F]:
    """``--limit/-n``: at most this many rows, 50 unless told."""
    return click.option(
        "--limit",
        "-n",
        type=click.IntRange(1, LIST_LIMIT),
        default=50,
        show_default=True,
        help=help,
    )
