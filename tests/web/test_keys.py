"""Concurrency keys through the JSON API, the dashboard's queue page and
``/metrics`` (issue 39), on every backend, through a real server."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tenure import App
from tests.conformance.helpers import claim_one, register


def keyed(app: App, key: str | None, n: int, queue: str = "q") -> None:
    app.enqueue_many("t", [{"i": i} for i in range(n)], queue=queue, concurrency_key=key)


def test_enqueue__takes_a_concurrency_key_debounce_and_unique_for(api: httpx.Client) -> None:
    made = api.post("/api/jobs", json={"task": "t", "concurrency_key": "customer-42"})
    assert made.status_code == 201, made.text
    assert made.json()["concurrency_key"] == "customer-42"
    assert api.get(f"/api/jobs/{made.json()['id']}").json()["concurrency_key"] == "customer-42"
    page = api.get(f"/jobs/{made.json()['id']}").text
    assert "<dt>concurrency key</dt>" in page
    assert 'policy#keys">customer-42</a>' in page
    body = {"task": "reindex", "key": "tenant-7", "debounce": 60, "args": {"n": 1}}
    first = api.post("/api/jobs", json=body).json()
    again = api.post("/api/jobs", json={**body, "args": {"n": 2}}).json()
    assert (again["id"], again["args"], again["state"]) == (first["id"], {"n": 2}, "scheduled")
    unique = {"task": "sync", "key": "nightly", "unique_for": 3600}
    assert (
        api.post("/api/jobs", json=unique).json()["id"]
        == (api.post("/api/jobs", json=unique).json()["id"])
    )


def test_a_workflows_step__takes_a_concurrency_key(api: httpx.Client) -> None:
    step = {"task": "t", "queue": "q", "concurrency_key": "tenant-1"}
    made = api.post("/api/workflows", json={"flow": {"chain": [step, {"task": "t"}]}})
    assert made.status_code == 201, made.text
    assert [j["concurrency_key"] for j in made.json()["jobs"]] == ["tenant-1", None]
    refused = api.post("/api/workflows", json={"flow": {**step, "debounce": 1}})
    assert refused.status_code == 400


def test_enqueue_with_bad_key_options__is_a_400_and_stores_nothing(
    api: httpx.Client, web_app: App
) -> None:
    for body, fragment in [
        ({"task": "t", "debounce": 5}, "debounce needs a key"),
        ({"task": "t", "key": "k", "debounce": -1}, "debounce must be"),
        ({"task": "t", "key": "k", "unique_for": 5, "debounce": 5}, "not both"),
        ({"task": "t", "concurrency_key": "x" * 129}, "invalid concurrency_key"),
        ({"task": "t", "concurrency_key": "a\nb"}, "invalid concurrency_key"),
    ]:
        response = api.post("/api/jobs", json=body)
        assert response.status_code == 400, (body, response.text)
        assert fragment in response.json()["message"]
    assert web_app.queues() == []


def test_keys__lists_queued_and_active_jobs_per_key_and_the_limits(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    keyed(web_app, "a", 3)
    keyed(web_app, "b", 1)
    keyed(web_app, None, 1)
    assert claim_one(backend, register(backend, "w-1", ("q",)), ("q",)).concurrency_key == "a"
    api.put("/api/queues/q/policy", json={"max_active_per_key": 2, "fair": True})
    found = api.get("/api/queues/q/keys").json()
    assert found["queue"] == "q"
    assert found["limits"] == {"max_active_per_key": 2, "rate_limit_per_key": None,
                               "rate_interval_per_key": 1.0, "fair": True}  # fmt: skip
    assert found["keys"][0] == {"key": "a", "queued": 2, "active": 1}
    assert {(k["key"], k["queued"], k["active"]) for k in found["keys"][1:]} == {
        ("b", 1, 0), (None, 1, 0),
    }  # fmt: skip
    assert len(api.get("/api/queues/q/keys", params={"limit": 1}).json()["keys"]) == 1
    assert api.get("/api/queues/q/keys", params={"limit": 0}).status_code == 400
    assert api.get("/api/queues/bad%20q/keys").status_code == 400


def test_policy__reads_and_changes_the_per_key_fields(api: httpx.Client) -> None:
    changed = api.put("/api/queues/q/policy", json={"rate_limit_per_key": 5,
                                                     "rate_interval_per_key": 2.0})  # fmt: skip
    assert changed.status_code == 200, changed.text
    got = api.get("/api/queues/q/policy").json()
    assert (got["rate_limit_per_key"], got["rate_interval_per_key"]) == (5, 2.0)
    refused = api.put("/api/queues/q/policy", json={"max_active_per_key": 0})
    assert refused.status_code == 400
    assert api.get("/api/queues/q/policy").json()["max_active_per_key"] is None


def test_queue_page__shows_its_busiest_keys(api: httpx.Client, web_app: App) -> None:
    keyed(web_app, "customer-<42>", 2)
    web_app.queue("q").set_policy(max_active_per_key=3)
    page = api.get("/queues/q/policy").text
    assert 'id="key-counts"' in page
    assert "<code>customer-&lt;42&gt;</code>" in page
    assert "<code>max_active_per_key</code> (3)" in page
    assert "No queued or active jobs." in api.get("/queues/empty/policy").text


def test_metrics__jobs_per_key_as_histograms_never_a_series_per_key(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    for i in range(30):
        keyed(web_app, f"customer-{i}", 1 + i % 3)
    keyed(web_app, None, 5)
    keyed(web_app, "customer-0", 2, queue="unlimited")
    claim_one(backend, register(backend, "w-1", ("q",)), ("q",))
    assert "tenure_key_waiting_count" not in api.get("/metrics").text  # no per-key field: no scan
    web_app.queue("q").set_policy(max_active_per_key=5)
    text = api.get("/metrics").text
    assert "customer-" not in text  # no label of a key
    assert 'queue="unlimited"' in text and 'tenure_key_waiting_count{queue="unlimited"}' not in text
    waiting = dict(re.findall(r'tenure_key_waiting_bucket\{le="([^"]+)",queue="q"\} (\S+)', text))
    # 30 keys: 10 with 1 job queued, 10 with 2, 10 with 3 (one of them claimed: 0 left).
    assert float(waiting["0.0"]) == 1  # customer-0: its one job claimed
    assert float(waiting["1.0"]) == 10
    assert float(waiting["2.0"]) == 20
    assert float(waiting["+Inf"]) == 30
    assert 'tenure_key_waiting_count{queue="q"} 30.0' in text
    assert 'tenure_key_waiting_sum{queue="q"} 59.0' in text
    assert 'tenure_key_active_count{queue="q"} 30.0' in text
    assert 'tenure_key_active_sum{queue="q"} 1.0' in text
