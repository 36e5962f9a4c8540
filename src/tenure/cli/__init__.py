"""The ``tenure`` command: thin click commands over :class:`tenure.app.App` and the worker.

Every error ends the command with one line on stderr (``error: ...``) and a
non-zero exit code: 2 for a usage error, 1 for anything else. Set
``TENURE_DEBUG=1`` to get the traceback of an unexpected error instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click
from click.core import ParameterSource

from tenure.cli import (
    bench,
    chaos,
    dlq,
    events,
    jobs,
    operators,
    periodic,
    policy,
    serve,
    worker,
)
from tenure.cli.common import CliState
from tenure.cli.output import report
from tenure.config import DEFAULT_URL


class TenureGroup(click.Group):
    """A group whose errors are one line each: never a usage block, never a traceback."""

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


for command in (
    jobs.enqueue,
    jobs.status,
    jobs.jobs,
    jobs.job,
    jobs.cancel,
    dlq.dlq,
    events.events,
    policy.policy,
    periodic.periodic,
    operators.queue,
    operators.workers,
    operators.health,
    worker.worker,
    serve.serve,
    chaos.chaos,
    bench.bench,
):
    cli.add_command(command)


def main() -> None:
    """The console script's entry point."""
    cli.main(prog_name="tenure")


__all__ = ["cli", "main"]
