"""The dashboard's pages, as HTML: every page renders on every backend, and
every value shows as text, never as markup."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx

from tenure import App
from tenure.core.states import Outcome
from tenure.job import JobSpec
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
        "/": ["mail", 'data-state="dead">1<', 'id="feed"'],
        f"/jobs/{job.id}": [job.id, "send", "#1", "error", "Fail: &lt;script&gt;"],
        "/queues/mail/dead": [job.id, 'dead">error</span> 1', 'name="confirm"'],
        "/queues/mail/policy": ['name="lease_ttl" value="15.0"', "&#34;at-least-once&#34;"],
        "/workers": ["w-1", "test-host", "12345", "mail"],
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
