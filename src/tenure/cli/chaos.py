"""``tenure chaos``: break real workers on the configured backend, and measure."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from tenure.cli.common import CliState
from tenure.core.urls import redacted


@click.command()
@click.argument("experiments", nargs=-1, metavar="[EXPERIMENT]...")
@click.option("--runs", type=click.IntRange(1, 20), default=3, show_default=True,
              help="How many times kill9 repeats (it reports the median and the max).")  # fmt: skip
@click.pass_context
def chaos(ctx: click.Context, experiments: tuple[str, ...], runs: int) -> int:
    """Kill, freeze, slow down and drain real workers; print what tenure did.

    EXPERIMENT is any of kill9, freeze, slow, drain, child (default: all). Each
    runs on a private queue (chaos.*) of the configured backend. Exits non-zero
    when a guarantee was broken.
    """
    from tenure.chaos.experiments import EXPERIMENTS, ExperimentFailed, Report

    unknown = sorted(set(experiments) - set(EXPERIMENTS))
    if unknown:
        raise click.BadParameter(
            f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENTS)}",
            param_hint="EXPERIMENT",
        )
    state = ctx.find_root().find_object(CliState)
    assert state is not None
    console = Console(highlight=False)
    table = Table(title=f"tenure chaos on {redacted(state.url)}")
    for column in ("experiment", "figure", "measured", "target", ""):
        table.add_column(column)
    broken = 0
    for name in experiments or tuple(EXPERIMENTS):
        console.print(f"running {name} ...")
        try:
            report = (
                EXPERIMENTS[name](state.url, runs=runs)
                if name == "kill9"
                else (EXPERIMENTS[name](state.url))
            )
        except ExperimentFailed as exc:
            report = Report(name, violations=[str(exc)])
        for f in report.figures:
            value = f"{f.value:.3f} {f.unit}".strip() if f.unit else f"{f.value:g}"
            table.add_row(name, f.name, value, f.target, "ok" if f.ok else "MISSED")
        for v in report.violations:
            table.add_row(name, "guarantee broken", v, "never", "BROKEN")
        if not report.violations:
            table.add_row(name, "nothing lost, no stale settle, no extra start", "held", "", "ok")
        broken += not report.ok
    console.print(table)
    return 1 if broken else 0
