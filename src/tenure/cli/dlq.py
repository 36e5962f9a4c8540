"""The dead-letter queue: list, show, retry and purge dead jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import click

from tenure.app import App
from tenure.cli.common import CliError, json_option, limit_option, open_app
from tenure.cli.jobs import list_jobs
from tenure.cli.output import print_job, print_json
from tenure.core.states import State
from tenure.formats import job_dict

QUEUE_HELP = "Only this queue (default: every queue)."


@click.group()
def dlq() -> None:
    """Inspect, retry and purge dead jobs."""


@dlq.command("list")
@click.option("--queue", "-q", help=QUEUE_HELP)
@limit_option()
@click.option("--after", metavar="CURSOR", help="The next cursor a previous page printed.")
@json_option
def list_(queue: str | None, limit: int, after: str | None, as_json: bool) -> None:
    """List dead jobs, newest first."""
    list_jobs(queue, State.DEAD, limit, after, as_json=as_json, empty="no dead jobs")


@dlq.command()
@click.argument("job_id", metavar="ID")
@json_option
def show(job_id: str, as_json: bool) -> None:
    """Show a dead job: its fields, history and full last error (ID: its id,
    or a unique prefix of 8 characters or more)."""
    job = open_app().get_job(job_id)
    if job.state != State.DEAD:
        raise CliError(f"job {job_id} is {job.state}, not dead (see 'tenure job {job_id}')")
    if as_json:
        print_json(job_dict(job))
    else:
        print_job(job, open_app().queue(job.queue).policy())


@dlq.command()
@click.option("--queue", "-q", help=QUEUE_HELP)
@click.option("--all", "all_", is_flag=True, help="Retry every dead job (of --queue, if given).")
@click.argument("job_ids", metavar="[ID]...", nargs=-1)
def retry(queue: str | None, all_: bool, job_ids: tuple[str, ...]) -> None:
    """Requeue dead jobs with their budgets reset: those named by ID (or by
    a unique prefix of 8 characters or more), or every one with --all. Their
    attempts are numbered on, and each gets a 'retried' event."""
    if bool(job_ids) == all_:
        where = f"of queue {queue!r}" if queue else "of every queue"
        raise click.UsageError(
            f"name the dead jobs to retry by ID, or pass --all to retry every dead job {where}"
            if not all_
            else "pass either IDs or --all, not both"
        )
    moved = _apply(open_app(write=True), "retry", queue, job_ids)
    click.echo(f"retried {moved} dead job(s)")


@dlq.command()
@click.option("--queue", "-q", help=QUEUE_HELP)
@click.option("--yes", is_flag=True, help="Confirm purging every dead job (needed without IDs).")
@click.argument("job_ids", metavar="[ID]...", nargs=-1)
def purge(queue: str | None, yes: bool, job_ids: tuple[str, ...]) -> None:
    """Delete dead jobs for good: those named by ID (or a unique prefix of 8
    characters or more), or all of them when none is given, with --yes."""
    if not job_ids and not yes:
        where = f"of queue {queue!r}" if queue else "of every queue"
        raise click.UsageError(f"purging every dead job {where} needs --yes")
    purged = _apply(open_app(write=True), "purge", queue, job_ids)
    click.echo(f"purged {purged} dead job(s)")


def _apply(app: App, verb: str, queue: str | None, job_ids: Sequence[str]) -> int:
    """Retry or purge: the given jobs (each checked to be dead first), else whole queues."""
    groups: Mapping[str, list[str] | None]
    if job_ids:
        groups = _dead_by_queue(app, queue, job_ids)
    else:  # None: every dead job of the queue
        groups = dict.fromkeys([queue] if queue is not None else app.queues())
    total = 0
    for name, ids in groups.items():
        q = app.queue(name)
        total += q.retry_dead(ids, by="cli") if verb == "retry" else q.purge_dead(ids)
    return total


def _dead_by_queue(app: App, queue: str | None, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """The ids by queue, once each; CliError (nothing changed) if one is not dead."""
    groups: dict[str, list[str]] = {}
    for job_id in dict.fromkeys(job_ids):
        job = app.get_job(job_id)  # also by a unique prefix of its id
        if job.state != State.DEAD:
            raise CliError(f"job {job_id} is {job.state}, not dead; nothing was changed")
        if queue is not None and job.queue != queue:
            raise CliError(
                f"job {job_id} is in queue {job.queue!r}, not {queue!r}; nothing was changed"
            )
        if job.id not in groups.get(job.queue, []):
            groups.setdefault(job.queue, []).append(job.id)
    return groups
