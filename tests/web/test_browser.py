"""The dashboard in a real browser: Playwright driving Debian's chromium
(``make system-deps`` installs it; Playwright's own browser download is not
used), on SQLite and on PostgreSQL. It logs in to a dashboard that opens with
the recent past (a worker's death recovered before the page opened), sees the
feed name tasks and keep progress events apart, follows a queue's count to
its jobs, filters and cancels some, follows a job's progress and death on its
page and retries it there, and edits a policy whose fields are checked in the
page and by the server; a queue's page counts its busiest concurrency keys.
Stored text with invisible characters shows them as
escapes. A workflow's page draws its steps by depth, coloured by state and
joined by edges, follows them live and links them to their job pages. ``make screenshots`` keeps


escapes. In a Django project's ASGI app, the dashboard opens to its staff
after Django's own login page, and its forms work there. ``make screenshots`` keeps
each page's screenshot in docs/img/ (TENURE_SCREENSHOTS names the folder; a
temporary one otherwise)."""

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

import tenure
from tenure import App
from tenure.backends.base import WorkerInfo
from tenure.core.states import Outcome, State
from tenure.core.workflows import Step
from tenure.job import JobSpec
from tests.conformance.helpers import claim_one, decision_for, register, rescue_until
from tests.conftest import SyncBackend, fresh_storage_url
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


ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # local, with seconds
BIDI = "\u202e"  # shows the text after it right to left: "live\u202eevil" reads "livelive"


@pytest.fixture(params=["sqlite", "postgres"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Fresh storage of the SQL backends (the pages read Redis through the same verbs)."""
    return fresh_storage_url(request.param, request, tmp_path)


def test_dashboard__history_feed_jobs_browser_and_policy_editor(
    page: Any,
    shots: Callable[[Any, str], None],
    serve: Callable[..., Served],
    open_backend: Callable[[str], SyncBackend],
    storage_url: str,
) -> None:
    url = storage_url
    app = App(url)
    try:
        board = Dashboard(page, shots, serve(app, token=TOKEN).url, app, open_backend(url))
        board.worker.register_worker(WorkerInfo(id="worker-1", hostname=f"live{BIDI}evil",
                                                pid=1, queues=("default", "mail")))  # fmt: skip
        lost = a_worker_dies_and_a_job_reports_progress(board, open_backend(url))
        board.open("/")  # the login form, first
        page.fill("input[name=token]", TOKEN)
        page.click("button")
        expect(page.locator("h1")).to_have_text("Queues")

        recovered = the_overview_opens_with_the_recent_past(board, lost)
        the_jobs_browser_filters_and_cancels(board)
        a_job_page_follows_its_job_then_retries_it(board, recovered)
        a_policy_is_edited(board)
        a_queue_page_shows_its_busiest_keys(board)
        board.open("/workers")
        expect(page.locator("td", has_text="live\\u202eevil")).to_be_visible()  # escaped
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


def done(page: Any, notice: str) -> None:
    """Until the action's notice shows, then until the page reloaded after it."""
    expect(page.locator("#notice")).to_have_text(notice)
    expect(page.locator("#notice")).to_be_hidden()


def a_worker_dies_and_a_job_reports_progress(board: Dashboard, doomed: Any) -> Any:
    """Before any page is open: what the overview must show from storage's events."""
    register(doomed, "worker-2", ("default",))
    lost = board.app.enqueue("resize", {"image": 7})
    claim_one(doomed, "worker-2")
    doomed.close()  # as a kill -9 does: its liveness lock goes with it, not deregistered
    rescue_until(board.worker, lost.id)
    busy = board.app.enqueue("send_email", {"to": "a@example.com"}, queue="mail")
    claimed = claim_one(board.worker, "worker-1", ("mail",))
    board.worker.progress(claimed.id, claimed.fence, {"step": f"1{BIDI}2"})
    board.worker.complete(claimed.id, claimed.fence, {"sent": True})
    assert claimed.id == busy.id
    return lost


def the_overview_opens_with_the_recent_past(board: Dashboard, lost: Any) -> Any:
    page = board.page
    stalled = page.locator("#feed li.stalled")
    expect(stalled).to_have_count(1)  # recorded before the page opened
    expect(stalled).to_contain_text("worker_gone")
    expect(stalled.locator(".task")).to_have_text("resize")  # each row names its task
    expect(page.locator("#feed li.completed .task")).to_have_text("send_email")
    assert ISO_TIME.match(stalled.locator("time").inner_text())
    expect(page.locator("#chart .bar[title$=' 1 stalled']")).to_have_count(1)  # charted
    expect(page.locator("#chart-max")).to_have_text(re.compile(r"^\d+ jobs$"))  # axes, units
    assert ISO_TIME.match(page.locator(".plot .x-axis .from").first.inner_text())
    expect(page.locator("#feed li.progress")).to_have_count(0)  # the job's page has them
    page.check("#show-progress")
    expect(page.locator("#feed li.progress .detail")).to_have_text('{"step":"1\\u202e2"}')
    expect(page.locator("#feed[data-connected]")).to_be_attached()  # and live from there
    claimed = claim_one(board.worker, "worker-1")  # its recovery ends at its next start
    assert claimed.id == lost.id
    expect(page.locator("#latency .bar[title*=': 1 recovered']")).to_have_count(1)
    expect(page.locator("#latency-worst")).to_contain_text("Slowest shown")
    expect(page.locator("#latency-max")).to_have_text(re.compile(r"^[0-9.]+ s$"))
    board.shoot("overview")
    return claimed


def the_jobs_browser_filters_and_cancels(board: Dashboard) -> None:
    sent = [board.app.enqueue(task, {"to": to}, queue="mail")
            for task, to in (("send_email", f"b{BIDI}@x"), ("digest", "c@x"),
                             ("send_email", "d@x"))]  # fmt: skip
    page = board.page
    page.click('tr[data-queue="mail"] td[data-state="queued"] a')  # the count, live: 3
    expect(page.locator("h1")).to_have_text("Queued jobs of mail")
    expect(page.locator("tr[data-job]")).to_have_count(3)
    expect(page.locator("tr[data-job]").first).to_have_attribute("data-job", sent[2].id)
    expect(page.get_by_text('{"to":"b\\u202e@x"}')).to_be_visible()  # escaped
    board.shoot("jobs")
    page.fill("input[name=task]", "digest")
    page.click("form.filter button")
    expect(page.locator("tr[data-job]")).to_have_count(1)
    page.check(f"input[value='{sent[1].id}']")
    page.click("button[data-action=cancel-selected]")
    done(page, "cancelled 1")
    expect(page.locator("tr[data-job]")).to_have_count(0)
    assert board.app.get_job(sent[1].id).state == State.CANCELLED


def a_job_page_follows_its_job_then_retries_it(board: Dashboard, claimed: Any) -> None:
    page = board.open(f"/jobs/{claimed.id}")
    board.worker.progress(claimed.id, claimed.fence, {"done": 3})
    expect(page.locator("#progress")).to_have_text('{"done":3}')  # its progress, live
    fatal = decision_for(board.worker, claimed, Outcome.ERROR, fatal=True)
    board.worker.fail(claimed.id, claimed.fence, Outcome.ERROR, "Fail: <i>bad</i> input", fatal)
    expect(page.locator(".state").first).to_have_text("dead")  # reloaded by itself
    expect(page.get_by_text("Fail: <i>bad</i> input").first).to_be_visible()  # text, not markup
    board.open("/queues/default/dead")
    board.shoot("dead")
    page = board.open(f"/jobs/{claimed.id}")
    page.click("text=Retry")
    done(page, "retried 1")
    expect(page.locator(".state").first).to_have_text("queued")
    assert board.app.get_job(claimed.id).state == State.QUEUED
    board.shoot("job")


def a_policy_is_edited(board: Dashboard) -> None:
    page = board.open("/queues/default/policy")
    saves: list[str] = []
    page.on("request", lambda r: saves.append(r.method) if r.method == "PUT" else None)
    lease = page.locator(".field", has=page.locator("#f-lease_ttl"))
    expect(lease.locator(".type")).to_have_text("seconds within [0.05, 3600]")
    expect(lease.locator(".doc")).to_contain_text("How long a claim stays valid")
    page.fill("#f-lease_ttl", "30")
    page.fill("#f-heartbeat_interval", "5")
    page.fill("#f-timeout", "2.5")
    page.check("#f-paused")
    page.select_option("#f-delivery", "at-most-once")
    page.click("form#policy button")
    done(page, "saved")
    policy = board.app.queue().policy()
    assert (policy.lease_ttl, policy.timeout, policy.paused) == (30, 2.5, True)
    assert policy.delivery == "at-most-once"
    page.fill("#f-lease_ttl", "1")  # under twice the heartbeat: the server refuses it
    page.click("form#policy button")
    expect(page.locator("#notice")).to_have_text(re.compile("heartbeat_interval"))
    page.reload()
    page.fill("#f-max_attempts", "0")  # out of bounds: the page refuses it, sends nothing
    page.click("form#policy button")
    expect(page.locator("#notice")).to_have_text(
        "max_attempts must be an integer within [1, 1000000], got 0"
    )
    page.fill("#f-max_attempts", "3")
    page.fill("#f-timeout", "")  # optional: empty is none
    page.uncheck("#f-paused")
    page.click("form#policy button")
    done(page, "saved")
    policy = board.app.queue().policy()
    assert (policy.lease_ttl, policy.timeout, policy.paused) == (30, None, False)
    assert saves == ["PUT"] * 3  # the refused in the page never went out
    board.shoot("policy")


def a_queue_page_shows_its_busiest_keys(board: Dashboard) -> None:
    """The per-key fields are edited as any other; the keys' table counts
    each key's queued and active jobs, the busiest first."""
    for key, n in (("customer-42", 3), ("tenant-<7>", 1), (None, 2)):
        board.app.enqueue_many("report", [{"i": i} for i in range(n)], queue="reports",
                               concurrency_key=key)  # fmt: skip
    claimed = claim_one(board.worker, "worker-1", ("reports",))
    assert claimed.concurrency_key == "customer-42"
    page = board.open("/queues/reports/policy")
    rows = page.locator("#key-counts tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td")).to_have_text(["customer-42", "2", "1"])
    expect(page.locator("#key-counts td code", has_text="tenant-<7>")).to_be_visible()  # text
    expect(page.locator("#key-counts td", has_text="(no key)")).to_be_visible()
    page.fill("#f-max_active_per_key", "2")
    page.check("#f-fair")
    page.click("form#policy button")
    done(page, "saved")
    policy = board.app.queue("reports").policy()
    assert (policy.max_active_per_key, policy.fair) == (2, True)
    expect(page.locator("#keys + p")).to_contain_text("max_active_per_key (2)")
    expect(page.locator("#keys + p")).to_contain_text("fair (on)")
    board.shoot("keys")


def test_a_workflow_page__draws_its_steps_follows_them_live_and_links_them(
    page: Any,
    shots: Callable[[Any, str], None],
    serve: Callable[..., Served],
    open_backend: Callable[[str], SyncBackend],
    storage_url: str,
) -> None:
    app = App(storage_url)
    try:
        board = Dashboard(page, shots, serve(app).url, app, open_backend(storage_url))
        register(board.worker, "worker-1")
        steps = [Step(JobSpec.create(task, {"n": n})) for n, task in enumerate(("fetch", "fetch"))]
        wf = app.workflow(tenure.chain(tenure.group(*steps), Step(JobSpec.create("total"))))
        first, second, total = wf.jobs
        board.open(f"/workflows/{wf.id}")
        boxes = page.locator("li.step")
        expect(boxes).to_have_count(3)
        expect(page.locator("li.step.step-queued")).to_have_count(2)
        expect(page.locator(f"#step-3.step-waiting[data-job='{total.id}']")).to_be_attached()
        expect(page.locator("svg.edges line")).to_have_count(2)  # from each fetch to total

        def colour() -> str:
            return str(page.locator("#step-3").evaluate("b => getComputedStyle(b).borderColor"))

        waiting = colour()
        for _ in range(2):
            claimed = claim_one(board.worker, "worker-1")
            board.worker.complete(claimed.id, claimed.fence, 1)
        expect(page.locator("li.step.step-completed")).to_have_count(2)  # live, from events
        expect(page.locator("#step-counts")).to_have_text("1 queued, 2 completed")
        expect(page.locator("#step-3")).to_have_class(re.compile(r"\bstep-queued\b"))
        assert colour() != waiting  # coloured by its state
        board.shoot("workflow")
        page.click("#step-3 a")
        expect(page.locator("h1")).to_contain_text(total.id)  # the step's own job page
        expect(page.locator("#workflow-link")).to_have_text(wf.id)
        page.click("#workflow-link")
        expect(page.locator("h1")).to_contain_text(wf.id)
        claimed = claim_one(board.worker, "worker-1")
        board.worker.complete(claimed.id, claimed.fence, 2)
        expect(page.locator("#workflow .state")).to_have_text("completed")  # reloaded at its end
        expect(page.locator("li.step.step-completed")).to_have_count(3)
        assert {first.id, second.id, total.id} == {j.id for j in app.get_workflow(wf.id).jobs}
        other = app.workflow(tenure.chain(*steps))
        board.open(f"/workflows/{other.id}")
        page.click("text=Cancel (every unfinished step)")
        done(page, "cancelled")
        expect(page.locator("#workflow .state")).to_have_text("cancelled")
        expect(page.locator("li.step.step-cancelled")).to_have_count(2)
    finally:
        app.close()


STAFF = """
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()
from django.contrib.auth.models import User
from orders.tasks import send_receipt
from tenure.contrib.django import app

User.objects.create_user("boss", password="a-staff-password", is_staff=True)
print(app.url, *(send_receipt.enqueue(order).id for order in (1, 2)))
"""


def test_the_dashboard_in_a_django_project__opens_to_staff_after_djangos_login(
    page: Any, tmp_path: Path
) -> None:
    pytest.importorskip("django")
    import subprocess
    import sys

    from tests.integration.test_django import build, environment, running
    from tests.servers import free_port, wait_port

    shop = build(tmp_path / "shop", None)
    with (shop / "shop" / "settings.py").open("a") as settings:
        settings.write('LOGIN_URL = "/admin/login/"\n')
    (shop / "staff.py").write_text(STAFF)
    made = subprocess.run([sys.executable, "staff.py"], cwd=shop, env=environment(),
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    url, *jobs = made.stdout.split()
    port = free_port()
    serve = [sys.executable, "-m", "uvicorn", "shop.asgi:application", "--port", str(port)]
    with running(serve, shop), App(url) as app:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        page.goto(f"{base}/tenure/")
        expect(page).to_have_url(f"{base}/admin/login/?next=/tenure/")  # Django's own login
        page.fill("#id_username", "boss")
        page.fill("#id_password", "a-staff-password")
        page.click("input[type=submit]")
        expect(page).to_have_url(f"{base}/tenure/")
        expect(page.locator("h1")).to_have_text("Queues")
        page.click('tr[data-queue="receipts"] td[data-state="queued"] a')
        expect(page.locator("h1")).to_have_text("Queued jobs of receipts")
        expect(page.locator("tr[data-job]")).to_have_count(2)
        page.check(f"input[value='{jobs[0]}']")
        page.click("button[data-action=cancel-selected]")  # the page's own POST: let through
        done(page, "cancelled 1")
        expect(page.locator("tr[data-job]")).to_have_count(1)
        assert app.get_job(jobs[0]).state == State.CANCELLED
