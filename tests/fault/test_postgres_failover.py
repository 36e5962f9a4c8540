"""PostgreSQL failover: a URL naming a primary and its standby; the primary
killed (kill -9), the standby promoted; workers follow it (``failover.py``).

With synchronous replication nothing acknowledged is lost: every acknowledged
enqueue is on the promoted server and runs; every acknowledged completion is
kept, and its job never runs again. With asynchronous replication the
promoted server may lack what the primary acknowledged last: measured here,
stated in docs/guarantees.md. ``make soak`` runs ten failovers of each, and
one whose primary's host vanishes (its connections left half-open).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure import App
from tenure.backends.postgres.url import CONNECT_TIMEOUT
from tenure.errors import BackendUnavailable
from tests.conftest import server_or_skip
from tests.fault.failover import FailoverConfig, FailoverReport, run
from tests.fault.nemesis import Netns
from tests.servers_standby import ReplicatedPostgres

RESUME_BOUND = 5.0  # seconds from the promotion to every worker's first claim there
# A standby this far behind at the kill (the primary's walsender frozen): on one
# machine replication lags by well under a millisecond, and loses next to nothing.
LAG = 0.3
# Asynchronous replication loses what was acknowledged after the standby stopped
# receiving (the lag began, or the kill did): nothing acknowledged this long before.
SLACK = 0.2
SOAK_FAILOVERS = int(os.environ.get("TENURE_SOAK_FAILOVERS", "10"))
# A failover manager decides this long after the primary's host vanished: by
# then a multi-host URL's TCP options (10 s) gave its connections up.
DETECT = 12.0


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPostgres]:
    pair = server_or_skip("postgres", lambda: ReplicatedPostgres(synchronous=False))
    yield pair
    pair.close()


def test_a_url_naming_the_standby_first__writes_on_the_primary(pair: ReplicatedPostgres) -> None:
    url = pair.new_database()
    name = url.rsplit("/", 1)[1]
    assert pair.standby is not None
    first_standby = (
        f"postgresql://postgres@127.0.0.1:{pair.standby.port},127.0.0.1:{pair.primary.port}/{name}"
    )
    with App(first_standby) as app:
        job = app.enqueue("t", {})
    assert pair.primary.psql(f"SELECT count(*) FROM tenure.jobs WHERE id = '{job.id}'", name) == "1"


def test_a_url_naming_only_standbys__refuses_to_open_saying_why(pair: ReplicatedPostgres) -> None:
    assert pair.standby is not None
    url = f"postgresql://postgres@127.0.0.1:{pair.standby.port},127.0.0.1:{pair.standby.port}/postgres"
    started = time.monotonic()
    with App(url) as app, pytest.raises(BackendUnavailable) as caught:
        app.queue("default").counts()
    assert time.monotonic() - started < 5
    assert "read-only" in str(caught.value) or "hot standby" in str(caught.value), caught.value


def failover(
    config: FailoverConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> FailoverReport:
    report = server_or_skip("postgres", lambda: run(config, tmp_path))
    with capsys.disabled():
        print(f"\n{report.table()}")
    return report


def assert_resumed(report: FailoverReport, bound: float = RESUME_BOUND) -> None:
    assert len(report.workers) == report.config.workers, "a worker exited"
    for f in report.failovers:
        assert set(f.resumed) == set(report.workers), report.table()
        assert max(f.resumed.values()) < bound, report.table()
    assert report.unfinished == [], report.table()


def assert_nothing_acknowledged_lost(report: FailoverReport) -> None:
    for f in report.failovers:
        assert f.lost_enqueues == [], report.table()
        assert f.lost_completions == [], report.table()
    assert report.reused_fences == [] and report.stale_settles == [], report.table()


def assert_only_the_lag_lost(report: FailoverReport) -> None:
    for f in report.failovers:
        window = f.killed - f.stopped + SLACK  # the ages count back from the death
        assert max(f.lost_enqueues + f.lost_completions, default=0.0) < window, report.table()


def test_synchronous_replication__a_failover_loses_nothing_acknowledged(tmp_path, capsys):
    report = failover(FailoverConfig(synchronous=True, lag=LAG), tmp_path, capsys)
    assert report.acked > 100 and report.settled > 100, report.table()
    assert_nothing_acknowledged_lost(report)
    assert_resumed(report)


def test_asynchronous_replication__a_failover_loses_what_the_standby_lacked(tmp_path, capsys):
    report = failover(FailoverConfig(synchronous=False, lag=LAG), tmp_path, capsys)
    assert report.acked > 100 and report.settled > 100, report.table()
    [lost] = report.failovers
    # What the standby lacked is lost: the measure sees it (else it could not fail).
    assert lost.lost_enqueues and lost.lost_completions, report.table()
    assert_only_the_lag_lost(report)
    # A claim the standby lacked is made again there under a fence of its own.
    assert report.reused_fences == [] and report.stale_settles == [], report.table()
    assert_resumed(report)


@pytest.mark.soak
@pytest.mark.timeout(SOAK_FAILOVERS * 60 + 300)
@pytest.mark.parametrize(
    ("synchronous", "lag"),
    [(True, LAG), (False, 0.0), (False, LAG)],
    ids=["sync-behind", "async", "async-behind"],
)
def test_failovers_one_after_another(synchronous, lag, tmp_path, capsys):
    config = FailoverConfig(synchronous, failovers=SOAK_FAILOVERS, load=5.0, workers=3, lag=lag)
    report = failover(config, tmp_path, capsys)
    if synchronous:
        assert_nothing_acknowledged_lost(report)
    else:
        assert_only_the_lag_lost(report)
        assert report.reused_fences == [] and report.stale_settles == [], report.table()
    assert_resumed(report)


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_a_primary_whose_host_vanished__workers_follow_the_promoted_standby(tmp_path, capsys):
    """The primary's end of the cable down, then the primary killed: its
    clients' connections are left half-open, as when a machine loses its power.
    A URL of several hosts gives them up within 10 s (its TCP defaults); each
    new connection then waits for the vanished host first, up to
    ``connect_timeout``, before it reaches the promoted standby."""
    why = Netns.unavailable()
    if why:
        pytest.skip(why)
    config = FailoverConfig(True, vanish=True, detect=DETECT, load=5.0, workers=3)
    report = failover(config, tmp_path, capsys)
    assert_nothing_acknowledged_lost(report)
    assert_resumed(report, bound=RESUME_BOUND + CONNECT_TIMEOUT)
