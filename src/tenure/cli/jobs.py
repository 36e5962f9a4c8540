"""Producers' and operators' commands on jobs: enqueue, status, jobs, job, cancel."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import click

from tenure.cli.common import CliError, cli_state, json_object, json_option, limit_option, open_app
from tenure.cli.output import (
    counts_table,
    print_job,
    print_jobs,
    print_json,
    show,
    state_of,
)
from tenure.core.states import State
from tenure.core.urls import redacted
from tenure.formats import job_dict
from tenure.job import Job

STATES = click.Choice([s.value for s in State])


@click.command()
@click.argument("task")
@click.option(
    "--args",
    "args",
    metavar="JSON",
    callback=json_object,
    default="{}",
    show_default=True,
    help="The job's arguments, a JSON object.",
)
@click.option(
    "--queue",
    "-q",
    help="Queue to put it on  [default: the task's own queue with --app, else default]",
)
@click.option("--delay", type=float, help="Seconds to wait before it may run.")
@click.option(
    "--key",
    help="Idempotency key: while a job with this key is unfinished, enqueueing again returns it.",
)
@click.option("--priority", type=int, help="Higher runs first.")
@click.option(
    "--max-attempts",
    type=int,
    help="Attempt budget (default: the task's with --app, else the queue policy's).",
)
@click.option("--timeout", type=float, help="Deadline of one attempt, in seconds.")
@click.option(
    "--concurrency-key",
    metavar="KEY",
    help="The key the queue's per-key limits (max_active_per_key, rate_limit_per_key) "
    "and fair turns count the job under, e.g. a customer's id.",
)
@click.option(
    "--debounce",
    type=float,
    metavar="SECONDS",
    help="With --key: while the key's job has not started, enqueueing again replaces its "
    "arguments and moves its start to SECONDS from now (the same job).",
)
@click.option(
    "--unique-for",
    type=float,
    metavar="SECONDS",
    help="With --key: return the key's job while unfinished or finished less than SECONDS ago.",
)
@click.option(
    "--any-task",
    is_flag=True,
    help="With --app: enqueue TASK even if the App does not define it (for a newer deploy).",
)
def enqueue(task: str, args: dict[str, Any], any_task: bool, **options: Any) -> None:
    """Enqueue a job of TASK by name; print its id and state. With --app, TASK
    must be one of the App's tasks (or pass --any-task)."""
    loaded = cli_state().loaded()
    if loaded is not None and not any_task and task not in loaded.tasks:
        raise CliError(unknown_task(task, loaded.tasks, cli_state().app_path))
    # enqueue_many takes every option a Task's with_options does (enqueue names fewer).
    [job] = open_app(create=True).enqueue_many(task, [args], **options)
    click.echo(f"{job.id} {job.state}")


def unknown_task(task: str, known: Collection[str], app_path: str | None) -> str:
    """Why a task the App does not define is refused, naming the closest ones."""
    import difflib  # only for this error: every other command starts without it

    close = difflib.get_close_matches(task, sorted(known), n=3, cutoff=0.6)
    if close:
        hint = f"did you mean {' or '.join(map(repr, close))}? "
    else:
        names = sorted(known)
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        hint = f"its tasks: {', '.join(names[:5]) or 'none'}{more}; "
    return (
        f"the App {app_path} defines no task {task!r}; {hint}(pass --any-task to enqueue it "
        "for a newer deploy)"
    )


@click.command()
@json_option
def status(as_json: bool) -> None:
    """Show how many jobs each queue holds, by state, and which storage that is."""
    app = open_app()  # checks the URL, and connects only when used
    if not as_json:  # before the counts: it helps most when the storage cannot be reached
        click.echo(f"storage: {redacted(app.url)} (from {cli_state().url_origin})")
    counts = {q: app.queue(q).counts() for q in app.queues()}
    if as_json:
        print_json(counts)
    elif not counts:
        click.echo("no queues yet")
    else:
        show(counts_table(counts))


@click.command()
@click.option("--queue", "-q", help="Only this queue (default: every queue).")
@click.option("--state", "-s", type=STATES, help="Only jobs in this state.")
@limit_option()
@click.option("--after", metavar="CURSOR", help="The next cursor a previous page printed.")
@json_option
def jobs(
    queue: str | None, state: str | None, limit: int, after: str | None, as_json: bool
) -> None:
    """List jobs, newest first."""
    list_jobs(queue, state, limit, after, as_json=as_json, empty="no jobs")


def list_jobs(
    queue: str | None,
    state: str | None,
    limit: int,
    after: str | None,
    *,
    as_json: bool,
    empty: str,
) -> None:
    """One page of jobs, as a table or as JSON."""
    page = open_app().jobs(queue, state, limit, after)
    if as_json:
        print_json({"jobs": [job_dict(j) for j in page.jobs], "next_cursor": page.next_cursor})
    else:
        print_jobs(page, empty=empty)


@click.command()
@click.argument("job_id", metavar="ID")
@json_option
def job(job_id: str, as_json: bool) -> None:
    """Show a job with its history of attempts. ID may be any unique prefix
    of the id, of 8 characters or more."""
    found = open_app().get_job(job_id)
    if as_json:
        print_json(job_dict(found))
    else:
        print_job(found, open_app().queue(found.queue).policy())


@click.command()
@click.argument("job_id", metavar="ID")
def cancel(job_id: str) -> None:
    """Cancel a job (ID: its id, or a unique prefix of 8 characters or more).
    A scheduled or queued job is cancelled at once; a running
    one is stopped by its worker within about a heartbeat (its handler sees
    current_job().cancelled, and is killed after the queue's cancel_grace).
    Of a workflow's id (wf-...): each of its unfinished steps, and the workflow."""
    cancelled = open_app(write=True).cancel(job_id)
    shown = state_of(cancelled) if isinstance(cancelled, Job) else cancelled.state
    click.echo(f"{cancelled.id} {shown}")
