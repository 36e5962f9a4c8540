"""The ``tenure`` command: thin click commands over :class:`tenure.app.App` and the worker.

Every error ends the command with one line on stderr (``error: ...``) and a
non-zero exit code: 2 for a usage error, 1 for anything else. Set
``TENURE_DEBUG=1`` to get the traceback of an unexpected error instead.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click
from click.core import ParameterSource

from tenure.cli.common import CliState
from tenure.config import DEFAULT_URL

# Each command by name, and the module that defines it under that name: one is
# imported when it runs, so that ``tenure worker`` starts without the others'
# imports (rich, the web server, the benchmarks).
COMMANDS = {
    "enqueue": "jobs", "status": "jobs", "jobs": "jobs", "job": "jobs", "cancel": "jobs",
    "dlq": "dlq", "events": "events", "policy": "policy", "periodic": "periodic",
    "queue": "operators", "workers": "operators", "health": "operators", "worker": "worker",
    "serve": "serve", "chaos": "chaos", "bench": "bench", "workflow": "workflows",
}  # fmt: skip


class TenureGroup(click.Group):
    """A group whose errors are one line each: never a usage block, never a
    traceback; its commands are imported when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"tenure.cli.{COMMANDS[cmd_name]}")
        command: click.Command = getattr(module, cmd_name)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            if os.environ.get("TENURE_DEBUG") and not isinstance(
                exc, click.ClickException | click.Abort
            ):
                raise
            from tenure.cli.output import report

            sys.exit(report(exc))
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=TenureGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="TENURE_URL",
    metavar="URL",
    help="Storage to use: sqlite:///path.db, postgresql://..., redis://... "
    f"(default: TENURE_URL, else the --app App's url, else {DEFAULT_URL}).",
)
@click.option(
    "--app",
    "app_path",
    envvar="TENURE_APP",
    metavar="MODULE:APP",
    help="The App (env TENURE_APP), e.g. myapp.tasks:app: its url and its tasks' defaults "
    "apply to every command, unless --url or TENURE_URL says otherwise.",
)
@click.version_option(package_name="tenure")
@click.pass_context
def cli(ctx: click.Context, url: str | None, app_path: str | None) -> None:
    """tenure: a job queue in which a job is never silently lost."""
    source = ctx.get_parameter_source("url")
    by = "--url" if source is ParameterSource.COMMANDLINE else "TENURE_URL"
    ctx.obj = CliState(url or None, by if url else None, app_path or None)


def main() -> None:
    """The console script's entry point."""
    cli.main(prog_name="tenure")


__all__ = ["cli", "main"]
