"""Rendering for the terminal (rich tables, readable times) and the one-line error report."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click
import orjson
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tenure.backends.base import Page, WorkerInfo
from tenure.config import QueuePolicy
from tenure.core.states import State
from tenure.core.workflows import Workflow, WorkflowState
from tenure.errors import TenureError
from tenure.flows import culprit
from tenure.formats import StepRow, seconds, spans, summary, to_json, when, workflow_steps
from tenure.job import Job

NUMERIC = frozenset(
    {"attempt", "attempts", "fence", "total", "pid", "leases", "step", *(s.value for s in State)}
)
SHRINK_TO = 24  # how narrow an error column may get on a narrow terminal
UNBOUNDED = 100_000


class _NoSuchError(click.ClickException):
    """Stands for click's NoArgsIsHelpError where click (< 8.2) has none."""


# click >= 8.2 raises this for a group called without a command; older clicks exit 0.
NO_ARGS_IS_HELP: type[click.ClickException] = getattr(
    click.exceptions, "NoArgsIsHelpError", _NoSuchError
)


def console(width: int | None = None) -> Console:
    """A console on the current stdout (which click's test runner may have replaced)."""
    return Console(highlight=False, width=width)


def show(renderable: Table) -> None:
    """Print a table whole: only its error column wraps, and never below SHRINK_TO.

    On a terminal too narrow even for that, lines run longer than the terminal
    (which wraps them) rather than cut an id or a time. Piped, a table is as
    wide as its content, one line per row.
    """
    out = console()
    size = Measurement.get(out, out.options.update_width(UNBOUNDED), renderable)
    width = out.width if out.is_terminal else size.maximum
    console(max(width, size.minimum)).print(renderable, crop=False)


def print_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


# -- tables ----------------------------------------------------------------


def _table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """A table of plain text (errors and arguments may hold '[...]': never markup)."""
    cells = [[Text(str(c)) for c in row] for row in rows]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for i, name in enumerate(columns):
        natural = max([cell_len(name), *(row[i].cell_len for row in cells)])
        table.add_column(
            name,
            justify="right" if name in NUMERIC else "left",
            no_wrap=name != "error",
            overflow="fold",
            min_width=min(natural, SHRINK_TO) if name == "error" else natural,
        )
    for row in cells:
        table.add_row(*row)
    return table


def counts_table(counts: Mapping[str, Mapping[State, int]]) -> Table:
    rows = [
        (queue, *(by_state.get(s, 0) for s in State), sum(by_state.values()))
        for queue, by_state in counts.items()
    ]
    return _table(["queue", *(s.value for s in State), "total"], rows)


def workers_table(workers: Iterable[WorkerInfo], now: float) -> Table:
    rows = [
        (w.id, w.hostname, w.pid, ",".join(w.queues), when(w.started_at), w.leases,
         f"{max(now - w.last_seen, 0.0):.1f} s ago", "alive" if w.alive else "gone")
        for w in workers
    ]  # fmt: skip
    columns = ["id", "host", "pid", "queues", "started", "leases", "last heartbeat", "liveness"]
    return _table(columns, rows)


def keys_table(keys: Iterable[dict[str, Any]]) -> Table:
    """A queue's concurrency keys (``tenure.formats.keys_dict``'s), with their
    queued and active jobs; "(no key)" for the jobs without one."""
    rows = [("(no key)" if k["key"] is None else k["key"], k["queued"], k["active"]) for k in keys]
    return _table(["key", "queued", "active"], rows)


def jobs_table(jobs: Iterable[Job]) -> Table:
    columns = ["id", "task", "queue", "state", "attempts", "created", "run at", "error"]
    rows = [
        (j.id, j.task, j.queue, state_of(j), j.attempts, when(j.created_at), when(j.run_at),
         summary(j.error))
        for j in jobs
    ]  # fmt: skip
    return _table(columns, rows)


def schedules_table(rows: Iterable[Sequence[object]]) -> Table:
    columns = ("schedule", "task", "queue", "when", "missed", "next tick", "last tick", "last job")
    return _table(columns, rows)


def history_table(job: Job) -> Table:
    columns = ["attempt", "fence", "worker", "started", "ended", "duration", "outcome", "error"]
    rows = [
        (a.attempt, a.fence, a.worker or "-", when(a.started_at), when(a.ended_at),
         seconds(None if a.ended_at is None else a.ended_at - a.started_at),
         a.outcome or "running", summary(a.error))
        for a in job.history
    ]  # fmt: skip
    return _table(columns, rows)


def state_of(job: Job) -> str:
    """A job's state, with why it is dead, or that its cancel is pending."""
    if job.dead_reason:
        return f"{job.state} ({job.dead_reason})"
    if job.cancel_requested and job.state is State.ACTIVE:
        return f"{job.state} (cancel requested)"
    return str(job.state)


def attempts_of(job: Job, policy: QueuePolicy) -> str:
    """A job's attempts against its budget, which a retry from the DLQ renewed."""
    budget = job.max_attempts or policy.max_attempts
    if not job.budget_from:
        return f"{job.attempts} of {budget}"
    since = job.attempts - job.budget_from
    return f"{job.attempts} ({since} of {budget} since its retry from the DLQ)"


def job_fields(job: Job, policy: QueuePolicy) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    fields: list[tuple[str, object]] = [
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("state", state_of(job)),
        ("attempts", attempts_of(job, policy)),
        ("stalls", f"{job.stalls} of {policy.max_stalls}"),
        ("fence", job.fence),
        ("priority", job.priority),
        ("key", job.key or "-"),
        ("created", when(job.created_at)),
        ("run at", when(job.run_at)),
        ("finished", when(job.finished_at)),
        ("timeout", seconds(timeout) if (timeout := job.timeout or policy.timeout) else "none"),
        ("worker", job.worker or "-"),
        ("lease expires", when(job.lease_expires_at)),
        ("args", to_json(job.args)),
    ]
    if job.concurrency_key is not None:
        fields.insert(9, ("concurrency key", job.concurrency_key))
    if job.workflow is not None:
        fields[3] = ("state", step_state(job))
        more = f", ... ({len(job.upstream)} steps)" if len(job.upstream) > 3 else ""
        fields += [("workflow", job.workflow + (" (may fail)" if job.may_fail else "")),
                   ("waits for", ", ".join(job.upstream[:3]) + more or "-")]  # fmt: skip
    if job.progress is not None:
        fields.append(("progress", to_json(job.progress)))
    if job.state == State.COMPLETED:
        fields.append(("result", to_json(job.result)))
    for name, value in fields:
        grid.add_row(name, Text(str(value)))
    return grid


def print_job(job: Job, policy: QueuePolicy) -> None:
    """A job's fields (budgets from ``policy`` where the job sets none), history and last error."""
    out = console()
    out.print(job_fields(job, policy))
    if job.history:
        out.print(Text("history:", style="bold"))
        show(history_table(job))
    if job.error:
        out.print(Text("last error:", style="bold"))
        out.print(Text(job.error.rstrip()))


def print_policy(queue: str, policy: QueuePolicy) -> None:
    console().print(Text(f"policy of queue {queue!r} (times in seconds):", style="bold"))
    show(_table(["field", "value"], [(k, to_json(v)) for k, v in policy.to_dict().items()]))


def print_jobs(page: Page, *, empty: str) -> None:
    """A page of jobs as a table, and the cursor of the next page if there is one."""
    if not page.jobs:
        click.echo(empty)
        return
    show(jobs_table(page.jobs))
    if page.next_cursor is not None:
        click.echo(f"next cursor: {page.next_cursor} (pass --after {page.next_cursor})")


def took(job: Job) -> str:
    """From when a step was due (its release, or its retry) to its end."""
    if job.finished_at is None or job.state not in (State.COMPLETED, State.DEAD):
        return "-"
    return seconds(max(job.finished_at - job.run_at, 0.0))


def steps_table(steps: Sequence[StepRow]) -> Table:
    """Steps in order, each task indented by its depth (how many steps, at
    most, lead to it); their last errors, if any has one."""
    errors = any(r.job.error for r in steps)
    columns = ["step", "task", "state", "attempts", "took", "waits for", "id"]
    rows = [
        (r.number, "  " * r.depth + r.job.task, step_state(r.job), r.job.attempts,
         took(r.job), spans(r.waits_for), r.job.id, *([summary(r.job.error)] if errors else []))
        for r in steps
    ]  # fmt: skip
    return _table([*columns, "error"] if errors else columns, rows)


def step_state(job: Job) -> str:
    """A step's state, and why a cancelled one was: its upstream failed."""
    if job.cancel_reason is not None:
        return f"{job.state} ({job.cancel_reason})"
    return state_of(job)


def print_workflow(workflow: Workflow) -> None:
    """A workflow's fields, its steps' states counted, then its steps in order."""
    steps = workflow_steps(workflow)
    counts = {s: sum(1 for j in workflow.jobs if j.state is s) for s in State}
    number = {r.job.id: r.number for r in steps}
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name, value in (
        ("id", workflow.id),
        ("state", workflow.state),
        ("key", workflow.key or "-"),
        ("created", when(workflow.created_at)),
        ("finished", when(workflow.finished_at)),
        ("steps", ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"),
        ("result of", "steps " + spans(number[i] for i in workflow.sinks if i in number)),
    ):
        grid.add_row(name, Text(str(value)))
    if workflow.state is WorkflowState.FAILED:
        job = culprit(workflow)
        retry = f"; 'tenure dlq retry {job.id}' resumes it" if job.state is State.DEAD else ""
        grid.add_row("failed at", Text(f"step {number.get(job.id)}, {job.task}: "
                                       f"{state_of(job)}{retry}"))  # fmt: skip
    console().print(grid)
    if steps:
        show(steps_table(steps))


# -- errors ----------------------------------------------------------------


def one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def report(exc: Exception) -> int:
    """Print ``exc`` as one line on stderr; return the exit code."""
    code = 1
    if isinstance(exc, NO_ARGS_IS_HELP):  # `tenure` or `tenure dlq` alone: the help is the answer
        exc.show()
        return exc.exit_code
    if isinstance(exc, click.UsageError):
        code = exc.exit_code
        message = exc.format_message()
        if exc.ctx is not None:
            message += f" (see '{exc.ctx.command_path} --help')"
    elif isinstance(exc, click.ClickException):
        code, message = exc.exit_code, exc.format_message()
    elif isinstance(exc, click.Abort):
        message = "aborted"
    elif isinstance(exc, TenureError):
        message = str(exc) or type(exc).__name__
    elif isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        _silence_stdout()  # the reader went away (`tenure jobs | head`): nothing to say
        return code
    elif isinstance(exc, OSError):
        message = str(exc)
    else:
        message = f"unexpected {type(exc).__name__}: {exc} (set TENURE_DEBUG=1 for a traceback)"
    click.echo(f"error: {one_line(message)}", err=True)
    return code


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
