"""The dashboard in a real browser: Playwright driving Debian's chromium
(``make system-deps`` installs it; Playwright's own browser download is not
used). It logs in, watches a job go from queued to completed, sees a worker's
death recovered as a ``stalled`` event, retries a dead job from the DLQ page
and edits a policy. ``make screenshots`` keeps each page's screenshot in
docs/img/ (TENURE_SCREENSHOTS names the folder; a temporary one otherwise)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from tenure import App
from tenure.core.states import Outcome, State
from tests.conformance.helpers import claim_one, decision_for, register, rescue_until
from tests.conftest import SyncBackend
from tests.web.conftest import Served

CHROMIUM = shutil.which("chromium")
TOKEN = "a-browser-test-token-0123456789"
WAIT_MS = 10_000


@pytest.fixture
def page() -> Iterator[Any]:
    if CHROMIUM is None:  # CI runs `make system-deps` first: there, a skip would hide a failure
        skip_or_fail = pytest.fail if os.environ.get("TENURE_REQUIRE_BACKENDS") else pytest.skip
        skip_or_fail("no chromium: `make system-deps` installs Debian's")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1100, "height": 760})
        context.set_default_timeout(WAIT_MS)
        yield context.new_page()
        browser.close()


@pytest.fixture
def shots(tmp_path: Path) -> Callable[[Any, str], None]:
    folder = Path(os.environ.get("TENURE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(page: Any, name: str) -> None:
        page.screenshot(path=str(folder / f"dashboard-{name}.png"), full_page=True)

    return shoot


@dataclass
class Dashboard:
    """A logged-in browser page, the App behind the server, a worker's storage."""

    page: Any
    shots: Callable[[Any, str], None]
    base: str
    app: App
    worker: Any

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        return self.page

    def shoot(self, name: str) -> None:
        self.shots(self.page, name)


def test_dashboard__live_jobs_recovery_dlq_and_policy(
    page: Any,
    shots: Callable[[Any, str], None],
    serve: Callable[..., Served],
    open_backend: Callable[[str], SyncBackend],
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'tenure.db'}"
    app = App(url)
    try:
        board = Dashboard(page, shots, serve(app, token=TOKEN).url, app, open_backend(url))
        register(board.worker, "worker-1", ("default", "mail"))
        board.open("/")  # the login form, first
        page.fill("input[name=token]", TOKEN)
        page.click("button")
        expect(page.locator("h1")).to_have_text("Queues")

        a_job_completes_live(board)
        lost = a_killed_worker_shows_as_stalled(board, open_backend(url))
        a_dead_job_is_retried(board, lost)
        a_policy_is_edited(board)
        board.open("/workers")
        expect(page.locator("td code", has_text="worker-1")).to_be_visible()
        board.shoot("workers")
        page.set_viewport_size({"width": 390, "height": 844})  # a phone
        board.open("/")
        expect(page.locator("#chart .bar").first).to_be_attached()
        board.shoot("phone")
        page.click("form.logout button")  # the browser's own form POST passes the CSRF check
        expect(page.locator("input[name=token]")).to_be_visible()
        board.open("/workers")
        expect(page.locator("input[name=token]")).to_be_visible()  # the session is gone
    finally:
        app.close()


def expect(locator: Any) -> Any:
    return sync_api.expect(locator)


def a_job_completes_live(board: Dashboard) -> None:
    job = board.app.enqueue("send_email", {"to": "<b>a@example.com</b>"}, queue="mail")
    page = board.open(f"/jobs/{job.id}")
    expect(page.locator(".state").first).to_have_text("queued")
    claimed = claim_one(board.worker, "worker-1", ("mail",))
    board.worker.complete(claimed.id, claimed.fence, {"sent": True})
    expect(page.locator(".state").first).to_have_text("completed")
    expect(page.get_by_text("<b>a@example.com</b>")).to_be_visible()  # text, not markup
    board.shoot("job")


def a_killed_worker_shows_as_stalled(board: Dashboard, doomed: Any) -> Any:
    page = board.open("/")
    expect(page.locator("#feed[data-connected]")).to_be_attached()  # live from now on
    register(doomed, "worker-2", ("default",))
    lost = board.app.enqueue("resize", {"image": 7})
    claim_one(doomed, "worker-2")
    doomed.close()  # as a kill -9 does: its liveness lock goes with it, not deregistered
    rescue_until(board.worker, lost.id)
    expect(page.locator("#feed li.stalled").first).to_contain_text("worker_gone")
    expect(page.locator('tr[data-queue="default"] td[data-state="queued"]')).to_have_text("1")
    expect(page.locator("#chart .bar[title$=' 1 stalled']")).to_have_count(1)  # charted
    claimed = claim_one(board.worker, "worker-1")  # its recovery ends at its next start
    assert claimed.id == lost.id
    expect(page.locator("#latency .bar[title^='1 recovered']")).to_have_count(1)
    expect(page.locator("#latency-worst")).to_contain_text("Slowest shown")
    board.shoot("overview")
    return claimed


def a_dead_job_is_retried(board: Dashboard, claimed: Any) -> None:
    job_id = claimed.id
    fatal = decision_for(board.worker, claimed, Outcome.ERROR, fatal=True)
    board.worker.fail(claimed.id, claimed.fence, Outcome.ERROR, "Fail: <i>bad</i> input", fatal)
    page = board.open("/queues/default/dead")
    board.shoot("dead")
    page.check(f"input[value='{job_id}']")
    page.click("button[value=selected]")
    expect(page.locator("#notice")).to_have_text("retried 1")
    assert board.app.get_job(job_id).state == State.QUEUED


def a_policy_is_edited(board: Dashboard) -> None:
    page = board.open("/queues/default/policy")
    page.fill("input[name=lease_ttl]", "30")
    page.fill("input[name=heartbeat_interval]", "5")
    page.click("form#policy button")
    expect(page.locator("#notice")).to_have_text("saved")
    assert board.app.queue().policy().lease_ttl == 30
    page.fill("input[name=lease_ttl]", "1")  # under twice the heartbeat: refused
    page.click("form#policy button")
    expect(page.locator("#notice")).to_have_text(re.compile("heartbeat_interval"))
    assert board.app.queue().policy().lease_ttl == 30
    page.reload()
    board.shoot("policy")
