"""The dashboard's pages, as HTML: every page renders on every backend, and
every value shows as text, never as markup."""

from __future__ import annotations

import dataclasses
import functools
import html
import re
from typing import Any

import httpx

import tenure
from tenure import App
from tenure.backends.base import WorkerInfo
from tenure.config import QueuePolicy, policy_fields
from tenure.core.states import Outcome
from tenure.core.workflows import Step
from tenure.job import JobSpec
from tenure.web.pages import visible
from tests.conformance.helpers import claim_one, decision_for, register

XSS = "<script>alert('x')</script>"
HTML = {"accept": "text/html"}


def test_pages__render_with_their_data(api: httpx.Client, web_app: App, backend: Any) -> None:
    worker = register(backend, "w-1", ("mail",))
    job = web_app.enqueue("send", {"n": 1}, queue="mail")
    claimed = claim_one(backend, worker, ("mail",))
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, f"Fail: {XSS}",
                 decision_for(backend, claimed, fatal=True))  # fmt: skip
    pages = {
        "/": ["mail", 'data-state="dead"><a href="/queues/mail/jobs?state=dead">1<', 'id="feed"'],
        f"/jobs/{job.id}": [job.id, "send", "#1", "error", "Fail: &lt;script&gt;"],
        "/queues/mail/dead": [job.id, 'dead">error</span> 1', 'name="confirm"'],
        "/queues/mail/jobs?state=dead": [job.id, "send", "Fail: &lt;script&gt;", "Retry selected"],
        "/queues/mail/policy": ['name="lease_ttl" value="15.0"', "&#34;at-least-once&#34;"],
        "/workers": ["w-1", 'class="state active">alive<', "test-host", "12345", "mail"],
    }
    for path, expected in pages.items():
        response = api.get(path, headers=HTML)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
        text = " ".join(response.text.split())
        for part in expected:
            assert part in text, (path, part)
        assert "<script>alert" not in response.text


def test_pages__show_values_as_text(api: httpx.Client, web_app: App) -> None:
    job = web_app.enqueue("t", {XSS: XSS}, key=XSS)
    page = api.get(f"/jobs/{job.id}", headers=HTML).text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    scripts = [line for line in page.splitlines() if "<script" in line]
    assert scripts == ['<script src="/static/dashboard.js" defer></script>']


def test_pages__errors_are_pages_for_browsers(api: httpx.Client) -> None:
    missing = api.get("/jobs/no-such-job", headers=HTML)
    assert missing.status_code == 404 and "<h1>404</h1>" in missing.text
    assert api.get("/jobs/no-such-job").json()["error"] == "JobNotFound"
    bad = api.get("/queues/%3Cb%3E/dead", headers=HTML)
    assert bad.status_code == 400 and "<b>" not in bad.text and "&lt;b&gt;" in bad.text


def rows(page: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', page)


def test_jobs_page__lists_a_state_newest_first_filtered_by_task(
    api: httpx.Client, web_app: App
) -> None:
    long = "x" * 200
    sent = [web_app.enqueue("send" if i % 3 else "resize", {"n": i, "pad": long}, queue="q")
            for i in range(7)]  # fmt: skip
    web_app.cancel(sent[1].id)
    page = api.get("/queues/q/jobs?state=queued", headers=HTML).text
    assert rows(page) == [j.id for j in reversed(sent) if j.id != sent[1].id]
    assert "Cancel selected" in page and "Retry selected" not in page
    assert "{&#34;n&#34;:6,&#34;pad&#34;:&#34;xxx" in page and long not in page  # shortened
    assert re.search(r'title="created [0-9-]+ [0-9:]+">\d+ s<', page)  # its age
    of_task = api.get("/queues/q/jobs?state=queued&task=resize", headers=HTML).text
    assert rows(of_task) == [sent[6].id, sent[3].id, sent[0].id]
    finished = api.get("/queues/q/jobs?state=cancelled", headers=HTML).text
    assert rows(finished) == [sent[1].id] and 'type="checkbox"' not in finished  # no action
    every = api.get("/queues/q/jobs", headers=HTML).text  # every state, with each one's
    assert rows(every) == [j.id for j in reversed(sent)] and "cancelled</span>" in every


def test_jobs_page__pages_through_with_the_cursor(api: httpx.Client, web_app: App) -> None:
    sent = web_app.enqueue_many("t", [{"n": i} for i in range(52)], queue="q")
    first = api.get("/queues/q/jobs?state=queued", headers=HTML).text
    assert rows(first) == [j.id for j in reversed(sent)][:50]
    older = re.search(r'href="([^"]*after=[^"]+)">Older', first)
    assert older is not None
    second = api.get("/queues/q/jobs" + html.unescape(older.group(1)), headers=HTML).text
    assert rows(second) == [sent[1].id, sent[0].id]
    bad = api.get("/queues/q/jobs?state=lost", headers=HTML)
    assert bad.status_code == 400 and "unknown state" in bad.text


def test_job_page__offers_retry_when_dead_and_cancel_while_unfinished(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    queued = web_app.enqueue("t", {}, queue="q")
    dead = web_app.enqueue("t", {}, queue="q")
    register(backend, "w-1", ("q",))
    claimed = claim_one(backend, "w-1", ("q",))
    assert claimed.id in (queued.id, dead.id)
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "boom",
                 decision_for(backend, claimed, fatal=True))  # fmt: skip
    waiting = queued if claimed.id == dead.id else dead
    died = api.get(f"/jobs/{claimed.id}", headers=HTML).text
    assert 'data-action="retry"' in died and ">Retry</button>" in died
    assert 'data-action="cancel"' not in died
    page = api.get(f"/jobs/{waiting.id}", headers=HTML).text
    assert 'data-action="cancel"' in page and 'data-action="retry"' not in page


def test_policy_page__shows_each_field_with_type_bounds_and_description(
    api: httpx.Client,
) -> None:
    page = " ".join(api.get("/queues/q/policy", headers=HTML).text.split())
    fields = policy_fields()
    assert [f.name for f in fields] == list(QueuePolicy.__dataclass_fields__)
    for f in fields:
        assert f.doc, f.name  # every field has its docstring
        start = page.index(f'data-kind="{f.kind}"> <label for="f-{f.name}">')
        block = page[start : page.index("</div>", start)]
        assert f.doc.split("``")[0] in html.unescape(block), f.name
        if f.bounds:
            assert f"within {f.bounds}" in block, f.name
    assert re.search(r'type="number" id="f-lease_ttl" name="lease_ttl" value="15.0"', page)
    assert 'min="0.05" max="3600.0" step="any"' in page
    assert re.search(r'id="f-max_attempts"[^>]*step="1"[^>]*required', page)
    assert re.search(r'id="f-timeout"[^>]*data-above [^>]*placeholder="none"', page)
    assert '<select id="f-delivery" name="delivery"' in page
    assert 'type="checkbox" id="f-paused" name="paused"' in page
    assert "integer within [1, 1000000]" in page and "seconds within (0, " in page


ODD = "\u202e\u200b\u2066\U000e0041\x1b"  # a bidi override, zero-width, isolate, tag, control


def test_visible__writes_invisible_characters_as_escapes() -> None:
    assert visible(f"live{ODD}é\n\tok") == "live\\u202e\\u200b\\u2066\\U000e0041\\u001bé\n\tok"
    assert visible("plain <b>") == "plain <b>" and visible(3) == 3


def test_pages__show_invisible_characters_as_escapes(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    backend.register_worker(WorkerInfo(id="w-1", hostname="live\u202eevil", pid=1, queues=("q",)))
    job = web_app.enqueue("t", {"to": f"a{ODD}"}, queue="q", key=f"k{ODD}")
    claimed = claim_one(backend, "w-1", ("q",))
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, f"Fail: {ODD}",
                 decision_for(backend, claimed, fatal=True))  # fmt: skip
    for path in ("/workers", f"/jobs/{job.id}", "/queues/q/jobs?state=dead", "/queues/q/dead"):
        page = api.get(path, headers=HTML).text
        assert not set(ODD) & set(page), path
        assert "\\u202e" in page, path


def test_jobs_page_actions__cross_site__get_403_and_change_nothing(
    api: httpx.Client, web_app: App
) -> None:
    job = web_app.enqueue("t", {}, queue="q")
    page = api.get("/queues/q/jobs?state=queued", headers=HTML).text
    retry = re.search(r'data-api="([^"]+)"', page)
    assert retry is not None
    forged = {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}
    for path in (f"/api/jobs/{job.id}/cancel", retry.group(1)):
        response = api.post(path, json={"ids": [job.id]}, headers=forged)
        assert response.status_code == 403, path
    assert web_app.get_job(job.id).state == "queued"


def test_job_page__takes_a_unique_id_prefix_and_lists_an_ambiguous_one(
    api: httpx.Client, web_app: App
) -> None:
    a, b = "2367cbe5-ab54-7000-8000-000000000001", "2367cbe5-ab99-7000-8000-000000000002"
    web_app.store([dataclasses.replace(JobSpec.create("t"), id=i) for i in (a, b)])
    page = api.get("/jobs/2367cbe5ab54", headers=HTML)
    assert page.status_code == 200 and a in page.text
    ambiguous = api.get("/jobs/2367cbe5", headers=HTML)
    assert ambiguous.status_code == 400
    assert a in ambiguous.text and b in ambiguous.text


def test_header_search__finds_a_job_by_a_prefix_of_its_id(api: httpx.Client, web_app: App) -> None:
    job = web_app.enqueue("t", {})
    page = api.get("/", headers=HTML).text
    assert 'action="/jobs"' in page and 'name="id"' in page
    found = api.get(f"/jobs?id=+{job.id[:13]}+", headers=HTML)
    assert found.status_code == 303 and found.headers["location"] == f"/jobs/{job.id[:13]}"
    assert job.id in api.get(found.headers["location"], headers=HTML).text
    assert api.get("/jobs?id=", headers=HTML).status_code == 400


def test_workflow_page__columns_by_depth_boxes_by_state_and_links(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    spec = functools.partial(JobSpec.create, args={"x": XSS})
    flow = tenure.chain(tenure.group(Step(spec("fetch")), Step(spec("fetch"), may_fail=True)),
                        Step(spec("total")), Step(spec("report")))  # fmt: skip
    wf = web_app.workflow(flow, key=XSS)
    claimed = claim_one(backend, register(backend, "w-1"))
    backend.complete(claimed.id, claimed.fence, None)
    page = api.get(f"/workflows/{wf.id}", headers=HTML).text
    assert "<script>alert" not in page and "&lt;script&gt;" in page  # the key, as text
    box = re.compile(r'<li class="step step-(\w+)" id="step-(\d)" data-job="([^"]+)" '
                     r'data-waits="([^"]*)">')  # fmt: skip
    columns = [box.findall(c) for c in page.split('<ol class="column">')[1:]]
    fetches = {(state, job_id) for state, _, job_id, _ in columns[0]}
    others = {claimed.id} ^ {wf.jobs[0].id, wf.jobs[1].id}
    assert fetches == {("completed", claimed.id), ("queued", others.pop())}
    assert columns[1] == [("waiting", "3", wf.jobs[2].id, "1 2")]  # after the group
    assert columns[2] == [("waiting", "4", wf.jobs[3].id, "3")]
    assert "may fail" in page and "waits for 1-2" in page
    assert f'href="/jobs/{wf.jobs[2].id}"' in page
    assert "data-live" in page and "Cancel (every unfinished step)" in page
    job_page = api.get(f"/jobs/{wf.jobs[2].id}", headers=HTML).text
    assert f'href="/workflows/{wf.id}">{wf.id}</a>: waits for 2 steps' in job_page
    assert "workflow-link" not in api.get(f"/jobs/{web_app.enqueue('t').id}", headers=HTML).text
    found = api.get(f"/jobs?id={wf.id}", headers=HTML)  # the header's search
    assert found.status_code == 303 and found.headers["location"] == f"/workflows/{wf.id}"
    assert api.get("/workflows/wf-nope", headers=HTML).status_code == 404


def test_workflow_page__of_a_failed_workflow_names_the_step_to_retry(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    flow = tenure.chain(Step(JobSpec.create("charge")), Step(JobSpec.create("receipt")))
    wf = web_app.workflow(flow)
    claimed = claim_one(backend, register(backend, "w-1"))
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "Fail: card declined",
                 decision_for(backend, claimed, fatal=True))  # fmt: skip
    page = " ".join(api.get(f"/workflows/{wf.id}", headers=HTML).text.split())
    assert f'<a href="/jobs/{claimed.id}">step 1, charge</a>: <span class="state dead">' in page
    assert "retry it (on its page, or from the dead-letter queue) and the workflow resumes" in page
    assert 'class="step step-cancelled" id="step-2"' in page and "(upstream_failed)" in page
