"""``tenure bench``: throughput and latency of tenure on the configured backend."""

from __future__ import annotations

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tenure.cli.common import CliState
from tenure.core.urls import redacted


@click.command()
@click.option("--jobs", type=click.IntRange(10), default=10_000, show_default=True,
              help="No-op jobs per drain (enqueued one by one, then in bulk).")  # fmt: skip
@click.option("--one-by-one", "one", type=click.IntRange(1), default=1_000, show_default=True,
              help="How many of them are enqueued one call at a time.")  # fmt: skip
@click.option("--batch", type=click.IntRange(1), default=1_000, show_default=True,
              help="Jobs per bulk enqueue (enqueue_many) call.")  # fmt: skip
@click.option("--concurrency", "-c", type=click.IntRange(1), default=4, show_default=True,
              help="Attempts at once per worker process.")  # fmt: skip
@click.option("--pool", type=click.Choice(["thread", "process"]), default="thread",
              show_default=True, help="The workers' executors.")  # fmt: skip
@click.option("--idle", type=click.IntRange(1), default=10, show_default=True,
              help="Idle pickup samples (one job into an idle worker).")  # fmt: skip
@click.option("--rate", type=click.FloatRange(min=1.0), default=100.0, show_default=True,
              help="Jobs per second for the end-to-end latency (below saturation).")  # fmt: skip
@click.option("--steady", type=click.IntRange(10), default=500, show_default=True,
              help="Jobs sent at --rate.")  # fmt: skip
@click.pass_context
def bench(ctx: click.Context, *, jobs: int, one: int, batch: int, concurrency: int, pool: str,
          idle: int, rate: float, steady: int) -> None:  # fmt: skip
    """Measure tenure on the configured backend (--url / TENURE_URL).

    Starts real `tenure worker` processes on private queues (bench.<id>.*) and
    prints enqueue rates (one by one, bulk), drain rates of already queued
    no-op jobs with 1 and 2 worker processes, idle pickup latency and
    end-to-end latency. The completed jobs stay in storage: use a scratch
    database.
    """
    from tenure.bench import Bench, BenchConfig

    state = ctx.find_root().find_object(CliState)
    assert state is not None
    if one >= jobs:
        raise click.BadParameter("must be smaller than --jobs", param_hint="--one-by-one")
    config = BenchConfig(url=state.url, jobs=jobs, one=one, batch=batch, concurrency=concurrency,
                         pool=pool, idle=idle, rate=rate, steady=steady)  # type: ignore[arg-type]  # fmt: skip
    console = Console(highlight=False)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True) as progress:
        tasks: dict[str, object] = {}

        def report(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=total)
            progress.update(tasks[step], completed=done)  # type: ignore[arg-type]

        figures = Bench(config, report).run()
    table = Table(title=f"tenure bench on {redacted(state.url)}")
    for column in ("figure", "measured", ""):
        table.add_column(column)
    for f in figures:
        table.add_row(f.name, f"{_number(f.value)} {f.unit}".strip(), f.note)
    console.print(table)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
