"""``tenure worker MODULE:APP``: run a worker for the App a module defines."""

from __future__ import annotations

import logging

import click
from click.core import ParameterSource

from tenure import loader
from tenure.app import App
from tenure.cli.common import CliError, CliState, cli_state
from tenure.cli.logs import LOG_FORMATS, LOG_LEVELS, stderr_logging
from tenure.config import WorkerConfig
from tenure.core.urls import redacted
from tenure.errors import InvalidInput, StorageLost

DEFAULTS = WorkerConfig()


@click.command()
@click.argument("app_path", metavar="[MODULE:APP]", required=False)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    help="A queue to serve; repeat for more (default: its tasks' queues).",
)
@click.option(
    "--concurrency",
    "-c",
    type=int,
    default=DEFAULTS.concurrency,
    show_default=True,
    help="How many attempts run at once (at most 256 with --pool process, 1024 with threads).",
)
@click.option(
    "--drain-timeout",
    type=float,
    default=DEFAULTS.drain_timeout,
    show_default=True,
    help="Seconds running attempts get to finish on SIGTERM.",
)
@click.option(
    "--pool",
    type=click.Choice(["process", "thread"]),
    default=DEFAULTS.pool,
    show_default=True,
    help="Run sync handlers in executor processes (killable at a deadline) or in threads "
    "(lighter, for I/O-bound code; a thread cannot be killed, only abandoned).",
)
@click.option(
    "--async-slots",
    type=int,
    default=DEFAULTS.async_slots,
    show_default=True,
    help="Async attempts one executor runs at once on its event loop.",
)
@click.option(
    "--max-jobs-per-executor",
    type=int,
    default=None,
    help="Replace an executor process after it ran this many jobs (leaky handlers).",
)
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@click.option("--log-level", type=LOG_LEVELS, default="info", show_default=True)
@click.option(
    "--log-format",
    type=LOG_FORMATS,
    default="text",
    show_default=True,
    help="Text lines, or JSON lines with each record's fields (job_id, task, queue, ...).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on http://HOST:PORT/metrics (needs tenure[web]).",
)
@click.option(
    "--metrics-host",
    default=DEFAULTS.metrics_host,
    show_default=True,
    help="The address the metrics are served on (with --metrics-port); any but loopback "
    "needs --metrics-public.",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    help="Serve the metrics on a --metrics-host other than loopback, to any host that reaches it.",
)
@click.pass_context
def worker(
    ctx: click.Context,
    *,
    app_path: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    drain_timeout: float,
    pool: str,
    async_slots: int,
    max_jobs_per_executor: int | None,
    burst: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    metrics_public: bool,
) -> None:
    """Run a worker for the App at MODULE:APP (e.g. myapp.tasks:app; default: --app)."""
    from tenure.worker import run_worker  # producers' commands need not load the worker
    from tenure.worker.executors.zygote_main import fork_zygote

    app_path = app_path or cli_state().app_path
    if not app_path:
        raise click.UsageError("Missing argument 'MODULE:APP' (or tenure --app / TENURE_APP).")
    if (
        metrics_port is None
        and ctx.get_parameter_source("metrics_host") == ParameterSource.COMMANDLINE
    ):
        raise click.UsageError("--metrics-host needs --metrics-port")
    if metrics_port is None and metrics_public:
        raise click.UsageError("--metrics-public needs --metrics-port")
    if metrics_port is not None:
        _metrics_extra()
    app = load_app(app_path)
    _check_url(ctx, app)
    config = WorkerConfig(
        queues=queues or _task_queues(app),
        concurrency=concurrency,
        drain_timeout=drain_timeout,
        burst=burst,
        pool=pool,  # type: ignore[arg-type]  # click.Choice checked it
        async_slots=async_slots,
        max_jobs_per_executor=max_jobs_per_executor,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        metrics_public=metrics_public,
    )
    # Now, while this process has imported the App and has no thread or connection yet.
    zygote = fork_zygote(app) if config.pool == "process" else None
    with app, stderr_logging(log_level, log_format):
        try:
            run_worker(app, config, app_path, zygote)
        except StorageLost:
            raise  # said by the worker, without a traceback
        except Exception:  # the one line the CLI prints is not enough to find why
            logging.getLogger("tenure.worker").exception("worker stopped by an error")
            raise


def _metrics_extra() -> None:
    """Metrics need prometheus-client: said in one line, before anything starts."""
    try:
        import tenure.metrics  # noqa: F401
    except ImportError as exc:
        missing = f"no module {exc.name}" if exc.name else str(exc)
        raise CliError(
            f"tenure worker --metrics-port needs the web extra: pip install 'tenure[web]' "
            f"({missing})"
        ) from None


def load_app(path: str) -> App:
    """Import the App at ``module:attr``; a malformed path is a usage error."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"expected MODULE:APP such as myapp.tasks:app, got {path!r}", param_hint="MODULE:APP"
        )
    try:
        return loader.load_app(path)
    except InvalidInput as exc:
        raise CliError(str(exc)) from None


def _check_url(ctx: click.Context, app: App) -> None:
    """An explicit --url must agree with the App's: a worker serves the storage of its App."""
    root = ctx.find_root()
    state = root.find_object(CliState)
    explicit = root.get_parameter_source("url") == ParameterSource.COMMANDLINE
    if state is not None and explicit and state.url != app.url:
        raise CliError(
            f"--url {redacted(state.url)} differs from the url of the App "
            f"({redacted(app.url)}); "
            "a worker uses its App's url"
        )


def _task_queues(app: App) -> tuple[str, ...]:
    return tuple(sorted({t.queue for t in app.tasks.values()})) or DEFAULTS.queues
