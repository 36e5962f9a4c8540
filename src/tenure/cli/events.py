"""``tenure events``: lifecycle events, as they were recorded, or as they come."""

from __future__ import annotations

import datetime

import click
import orjson

from tenure.cli.common import open_app
from tenure.core.events import Event


def _line(event: Event) -> str:
    at = datetime.datetime.fromtimestamp(event.at, datetime.UTC).isoformat(timespec="milliseconds")
    data = " " + orjson.dumps(event.data).decode() if event.data else ""
    return f"{at} {event.id} {event.queue} {event.kind} {event.job_id}{data}"


@click.command()
@click.option("--queue", "-q", metavar="Q", help="Only this queue's events (default: every queue).")
@click.option("--after", metavar="ID", help="Start after the event with this id.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new events.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def events(queue: str | None, after: str | None, follow: bool, as_json: bool) -> None:
    """Print lifecycle events, oldest kept first; with --follow, tail them."""
    app = open_app()
    for event in app.events(queue=queue, after=after, timeout=None if follow else 0):
        text = orjson.dumps(event.to_dict()).decode() if as_json else _line(event)
        click.echo(text)
