"""The operator's commands: the fleet's workers, a queue's pause and deletion,
and the health probe of a container."""

from __future__ import annotations

import socket
import time

import click

from tenure.cli.common import CliError, json_option, limit_option, open_app
from tenure.cli.output import keys_table, print_json, print_policy, show, workers_table
from tenure.config import QueuePolicy
from tenure.core import waiting
from tenure.errors import TenureError
from tenure.formats import keys_dict

QUEUE = click.argument("queue")


@click.command()
@json_option
def workers(as_json: bool) -> None:
    """List the registered workers: where they run, their queues, the leases
    they hold, when each last heartbeat came, and whether it is alive or gone
    as storage sees it (the sweeper's test: SQLite's flock, PostgreSQL's
    session lock, Redis's named connection). A gone worker stays listed
    until a sweep recovers its leases."""
    found = open_app().workers()
    if as_json:
        print_json([
            {"id": w.id, "host": w.hostname, "pid": w.pid, "queues": list(w.queues),
             "started_at": w.started_at, "leases": w.leases, "last_heartbeat": w.last_seen,
             "alive": w.alive}
            for w in found
        ])  # fmt: skip
        return
    if not found:
        click.echo("no workers")
        return
    show(workers_table(found, time.time()))


@click.group()
def queue() -> None:
    """Pause, resume or delete a queue, for the whole fleet; list its keys."""


@queue.command()
@QUEUE
def pause(queue: str) -> None:
    """Stop every worker claiming from QUEUE (at once: claims check it).
    Enqueues still land; running attempts finish."""
    print_policy(queue, open_app(create=True).queue(queue).pause())


@queue.command()
@QUEUE
def resume(queue: str) -> None:
    """Let workers claim from QUEUE again."""
    print_policy(queue, open_app(create=True).queue(queue).resume())


@queue.command()
@QUEUE
@click.option("--yes", is_flag=True, help="Confirm: the queue's jobs are deleted for good.")
def delete(queue: str, yes: bool) -> None:
    """Delete QUEUE: its jobs in every state with their history, its policy
    and its events. Refused while any of its jobs is active: pause it first."""
    if not yes:
        raise CliError(f"deleting queue {queue!r} deletes all its jobs for good: pass --yes")
    deleted = open_app(write=True).queue(queue).delete()
    click.echo(f"deleted queue {queue!r} and its {deleted} job(s)")


@queue.command()
@QUEUE
@limit_option("At most this many keys, the busiest first.")
@json_option
def keys(queue: str, limit: int, as_json: bool) -> None:
    """List QUEUE's concurrency keys with queued or active jobs, the busiest
    first, with its per-key limits (max_active_per_key, rate_limit_per_key,
    fair). "(no key)": its jobs enqueued without one."""
    handle = open_app().queue(queue)
    found = keys_dict(queue, handle.policy(), handle.key_counts(limit))
    if as_json:
        print_json(found)
        return
    limits = ", ".join(f"{k}={'none' if v is None else v}" for k, v in found["limits"].items())
    click.echo(f"keys of queue {queue!r} ({limits})")
    if not found["keys"]:
        click.echo("no queued or active jobs")
        return
    show(keys_table(found["keys"]))


@click.command()
@click.option(
    "--storage-only",
    is_flag=True,
    help="Only check that storage answers (a readiness probe); no worker needed.",
)
@click.option(
    "--max-age",
    type=click.FloatRange(0.1, 86_400.0),
    default=None,
    help="Seconds since a worker's last heartbeat within which it counts as alive  "
    "[default: the longest lease_ttl of its queues]",
)
@click.option(
    "--host",
    default=None,
    metavar="NAME",
    help="The host whose workers to check  [default: this host's name]",
)
def health(storage_only: bool, max_age: float | None, host: str | None) -> None:
    """Exit 0 when storage answers and a worker on this host is alive (storage
    holds its liveness lock or connection) and heartbeats (for container
    probes); else exit 1 with a one-line reason on stderr."""
    host = host or socket.gethostname()
    app = open_app()
    try:
        found = app.workers()
    except TenureError as exc:
        raise CliError(f"unhealthy: storage does not answer: {exc}{_waiting()}") from None
    if storage_only:
        click.echo("healthy: storage answers")
        return
    here = [w for w in found if w.hostname == host]
    if not here:
        raise CliError(f"unhealthy: no worker registered on host {host!r}{_waiting()}")
    alive = [w for w in here if w.alive]
    if not alive:
        raise CliError(
            f"unhealthy: the {len(here)} worker(s) registered on {host!r} are gone (storage "
            f"no longer holds their liveness lock or connection): {', '.join(w.id for w in here)}"
        )
    # The heartbeat's time is storage's clock; this host's clock should agree
    # within the limit (NTP keeps them within milliseconds).
    ttls = {q: app.queue(q).policy().lease_ttl for q in {q for w in alive for q in w.queues}}
    now = time.time()
    default = QueuePolicy().lease_ttl
    ages = {
        w.id: (now - w.last_seen, max_age or max((ttls[q] for q in w.queues), default=default))
        for w in alive
    }
    fresh = [age for age, limit in ages.values() if age <= limit]
    if not fresh:
        age, limit = min(ages.values())
        raise CliError(
            f"unhealthy: the last heartbeat of a worker on {host!r} was {age:.1f} s ago "
            f"(more than {limit:g} s)"
        )
    click.echo(
        f"healthy: {len(alive)} worker(s) alive on {host}, last heartbeat "
        f"{max(min(fresh), 0):.1f} s ago"
    )


def _waiting() -> str:
    """What this host's workers that wait for a storage connection say (each
    keeps a file while it waits: ``tenure.core.waiting``)."""
    found = waiting.waiting()
    if not found:
        return ""
    pid, reason = min(found.items())
    return f"; {len(found)} worker(s) here wait for a connection (pid {pid}: {reason})"
