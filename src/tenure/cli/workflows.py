"""A workflow's steps and state: ``tenure workflow ID``."""

from __future__ import annotations

import click

from tenure.cli.common import json_option, open_app
from tenure.cli.output import print_json, print_workflow
from tenure.formats import workflow_dict


@click.command()
@click.argument("workflow_id", metavar="ID")
@json_option
def workflow(workflow_id: str, as_json: bool) -> None:
    """Show a workflow (ID: its id, wf-...): its state, then its steps in an
    order where each comes after those it waits for, each task indented by
    its depth. "took": from when the step was due to its end. Cancel it with
    'tenure cancel ID'; retry a dead step with 'tenure dlq retry'."""
    found = open_app().get_workflow(workflow_id)
    if as_json:
        print_json(workflow_dict(found))
    else:
        print_workflow(found)
