"""A queue's policy, stored with the queue and read by every worker."""

from __future__ import annotations

from typing import Any

import click

from tenure.cli.common import json_option, open_app, parse_value
from tenure.cli.output import print_json, print_policy

QUEUE = click.option("--queue", "-q", default="default", show_default=True, help="The queue.")


@click.group()
def policy() -> None:
    """Read or change a queue's policy."""


@policy.command()
@QUEUE
@json_option
def get(queue: str, as_json: bool) -> None:
    """Print a queue's policy."""
    current = open_app().queue(queue).policy()
    if as_json:
        print_json(current.to_dict())
    else:
        print_policy(queue, current)


def _assignments(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for text in values:
        name, sep, raw = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected FIELD=VALUE, got {text!r}", ctx, param)
        changes[name.strip()] = parse_value(raw)
    return changes


@policy.command("set")
@QUEUE
@click.argument("changes", metavar="FIELD=VALUE...", nargs=-1, required=True, callback=_assignments)
def set_(queue: str, changes: dict[str, Any]) -> None:
    """Change fields of a queue's policy; every worker follows it.

    Values are read as JSON when they parse as JSON, else as strings, e.g.:

    \b
        tenure policy set lease_ttl=5 delivery=at-most-once timeout=null
    """
    updated = open_app(create=True).queue(queue).set_policy(**changes)
    print_policy(queue, updated)
