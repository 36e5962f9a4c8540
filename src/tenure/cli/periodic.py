"""``tenure periodic``: the App's schedules, their next tick, and the last in storage."""

from __future__ import annotations

import time

import click

from tenure.cli.common import CliError, cli_state, json_option, open_app
from tenure.cli.output import print_json, schedules_table, show
from tenure.formats import when


@click.command()
@json_option
def periodic(as_json: bool) -> None:
    """List the App's periodic schedules (needs --app or TENURE_APP): task, queue,
    schedule, next tick, and the last tick storage made a job for."""
    if cli_state().loaded() is None:
        raise CliError(
            "tenure periodic lists the schedules an App declares: pass --app module:app "
            "or set TENURE_APP"
        )
    app = open_app()
    schedules = sorted(app.schedules.values(), key=lambda s: s.name)
    last = app.last_ticks() if schedules else {}
    now = time.time()
    rows = [
        {
            "schedule": s.name,
            "task": s.task,
            "queue": s.queue,
            "cron": s.cron,
            "every": s.every,
            "tz": s.tz,
            "missed": str(s.missed),
            "next_tick": s.next_after(now),
            "last_tick": last[s.name].at if s.name in last else None,
            "last_job": last[s.name].job_id if s.name in last else None,
        }
        for s in schedules
    ]
    if as_json:
        print_json(rows)
    elif not rows:
        click.echo("no periodic schedules: declare one with @app.periodic(...) above @app.task")
    else:
        show(schedules_table([
            (s.name, s.task, s.queue, s.describe(), s.missed, when(s.next_after(now)),
             when(last[s.name].at if s.name in last else None),
             last[s.name].job_id if s.name in last else "-")
            for s in schedules
        ]))  # fmt: skip
