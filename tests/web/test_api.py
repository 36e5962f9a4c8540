"""The JSON API on every backend, through a real server over real storage."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from typing import Any

import httpx

import tenure
from tenure import App
from tenure.core.states import Outcome, State
from tenure.core.workflows import Step
from tenure.job import JobSpec
from tests.conformance.helpers import claim_one, decision_for, register

JSON_HEADERS = {"content-type": "application/json"}


def post(api: httpx.Client, path: str, body: Any) -> httpx.Response:
    return api.post(path, json=body)


def dead_job(app: App, backend: Any, worker: str, task: str = "t") -> str:
    """A job sent to the DLQ by a fatal error, as a worker would."""
    job = app.enqueue(task, {"n": 1})
    claimed = claim_one(backend, worker)
    assert claimed.id == job.id
    fatal = decision_for(backend, claimed, Outcome.ERROR, fatal=True)
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "Fail: bad input", fatal)
    return job.id


def test_queues__count_jobs_by_state(api: httpx.Client, web_app: App) -> None:
    web_app.enqueue("t", {}, queue="mail")
    web_app.enqueue("t", {}, queue="mail", delay=60)
    body = api.get("/api/queues").json()
    [mail] = body["queues"]
    assert mail["name"] == "mail"
    assert mail["counts"] == {**dict.fromkeys(State, 0), "queued": 1, "scheduled": 1}
    assert 0 <= mail["lag"] < 60  # the queued job has been due since its enqueue


def test_metrics__jobs_by_queue_and_state_lag_and_workflows(
    api: httpx.Client, web_app: App
) -> None:
    web_app.enqueue("t", {}, queue="mail")
    web_app.workflow(tenure.chain(Step(JobSpec.create("a")), Step(JobSpec.create("b"))))
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'tenure_jobs{queue="mail",state="queued"} 1.0' in response.text
    assert 'tenure_jobs{queue="default",state="waiting"} 1.0' in response.text
    assert 'tenure_queue_lag_seconds{queue="mail"}' in response.text
    assert 'tenure_workflows_stored{state="running"} 1.0' in response.text
    assert 'tenure_workflows_stored{state="failed"} 0.0' in response.text


def test_jobs__filtered_and_paged_by_cursor(api: httpx.Client, web_app: App) -> None:
    ids = [web_app.enqueue("t", {"i": i}).id for i in range(3)]
    web_app.enqueue("t", {}, queue="other")
    first = api.get("/api/jobs", params={"queue": "default", "state": "queued", "limit": 2}).json()
    assert first["next_cursor"] is not None
    second = api.get("/api/jobs", params={"queue": "default", "after": first["next_cursor"]})
    seen = [j["id"] for j in first["jobs"] + second.json()["jobs"]]
    assert seen == ids[::-1]  # newest first
    assert second.json()["next_cursor"] is None
    assert api.get("/api/jobs", params={"state": "dead"}).json()["jobs"] == []


def test_job__has_its_attempt_history(api: httpx.Client, web_app: App, backend: Any) -> None:
    worker = register(backend, "w-1")
    job = web_app.enqueue("t", {"n": 1})
    claimed = claim_one(backend, worker)
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "Traceback: boom",
                 decision_for(backend, claimed))  # fmt: skip
    got = api.get(f"/api/jobs/{job.id}").json()
    assert got["id"] == job.id and got["args"] == {"n": 1} and got["attempts"] == 1
    [attempt] = got["history"]
    assert attempt["worker"] == worker and attempt["outcome"] == "error"
    assert attempt["error"] == "Traceback: boom" and attempt["ended_at"] >= attempt["started_at"]


def test_enqueue__by_task_name(api: httpx.Client, web_app: App) -> None:
    body = {"task": "send", "args": {"to": "a@x"}, "queue": "mail", "priority": 5, "delay": 60}
    response = post(api, "/api/jobs", body)
    assert response.status_code == 201
    stored = web_app.get_job(response.json()["id"])
    assert (stored.task, stored.queue, stored.args, stored.priority, stored.state) == (
        "send", "mail", {"to": "a@x"}, 5, State.SCHEDULED,
    )  # fmt: skip


def test_cancel__queued_job_or_active_one_then_409_then_404(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    job = web_app.enqueue("t", {})
    assert api.post(f"/api/jobs/{job.id}/cancel").json()["state"] == "cancelled"
    again = api.post(f"/api/jobs/{job.id}/cancel")
    assert again.status_code == 409 and again.json()["error"] == "InvalidTransition"
    assert api.post("/api/jobs/no-such-job/cancel").status_code == 404
    assert api.get("/api/jobs/no-such-job").json()["error"] == "JobNotFound"
    running = web_app.enqueue("t", {})
    claim_one(backend, register(backend, "w-1"))
    stopping = api.post(f"/api/jobs/{running.id}/cancel").json()
    assert stopping["state"] == "active" and stopping["cancel_requested"] is True


def test_job_and_cancel__take_a_unique_id_prefix(api: httpx.Client, web_app: App) -> None:
    a, b = "2367cbe5-ab54-7000-8000-000000000001", "2367cbe5-ab99-7000-8000-000000000002"
    web_app.store([dataclasses.replace(JobSpec.create("t"), id=i) for i in (a, b)])
    assert api.get("/api/jobs/2367cbe5-ab54").json()["id"] == a
    assert api.get("/api/jobs/2367cbe5ab99").json()["id"] == b
    assert api.post("/api/jobs/2367cbe5-ab5/cancel").json()["id"] == a
    ambiguous = api.get("/api/jobs/2367cbe5")
    assert ambiguous.status_code == 400
    assert a in ambiguous.json()["message"] and b in ambiguous.json()["message"]
    assert api.get("/api/jobs/2367cbe5-ab7").status_code == 404


def test_dlq__lists_counts_retries_and_purges(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    worker = register(backend, "w-1")
    first, second, third = (dead_job(web_app, backend, worker) for _ in range(3))
    dead = api.get("/api/queues/default/dead").json()
    assert {j["id"] for j in dead["jobs"]} == {first, second, third}
    assert dead["jobs"][0]["dead_reason"] == "error"
    assert dead["counts_by_reason"] == {"error": 3}

    assert post(api, "/api/queues/default/dead/retry", {"ids": [first]}).json() == {"retried": 1}
    assert web_app.get_job(first).state == State.QUEUED
    retried = [e for e in backend.read_events(None, None, 1000) if e.kind == "retried"]
    assert [(e.job_id, e.data["by"]) for e in retried] == [(first, "api")]
    unknown = post(api, "/api/queues/default/dead/retry", {"ids": [second], "by": "cron"})
    assert unknown.status_code == 400 and web_app.get_job(second).state == State.DEAD

    refused = post(api, "/api/queues/default/dead/purge", {"all": True})
    assert refused.status_code == 400 and "confirm" in refused.json()["message"]
    wrong = post(api, "/api/queues/default/dead/purge", {"all": True, "confirm": "other"})
    assert wrong.status_code == 400
    assert web_app.queue().counts()[State.DEAD] == 2  # nothing was purged

    # A job that is not dead is never purged, even when named.
    body = {"ids": [first, second], "confirm": "default"}
    assert post(api, "/api/queues/default/dead/purge", body).json() == {"purged": 1}
    assert web_app.get_job(first).state == State.QUEUED
    body = {"all": True, "confirm": "default"}
    assert post(api, "/api/queues/default/dead/purge", body).json() == {"purged": 1}
    assert web_app.queue().counts()[State.DEAD] == 0


def test_dlq_retry_from_the_dashboard__is_recorded_as_the_dashboard_s(
    api: httpx.Client, web_app: App, backend: Any
) -> None:
    dead = dead_job(web_app, backend, register(backend, "w-1"))
    body = {"all": True, "by": "dashboard"}  # what the dashboard's script sends
    assert post(api, "/api/queues/default/dead/retry", body).json() == {"retried": 1}
    [retried] = [e for e in backend.read_events(None, None, 1000) if e.kind == "retried"]
    assert (retried.job_id, retried.data) == (dead, {"by": "dashboard", "attempts": 1})
    assert web_app.get_job(dead).attempts == 1  # numbered on from there


def test_policy__read_and_changed_as_the_cli_does(api: httpx.Client, web_app: App) -> None:
    assert api.get("/api/queues/mail/policy").json()["lease_ttl"] == 15.0
    changed = api.put("/api/queues/mail/policy", json={"lease_ttl": 30, "max_attempts": 5})
    assert changed.status_code == 200
    assert changed.json()["lease_ttl"] == 30 and changed.json()["max_attempts"] == 5
    assert web_app.queue("mail").policy().lease_ttl == 30
    for bad in ({"lease_ttl": 1}, {"lease_tll": 5}, {"delivery": "twice"}, {"max_stalls": True}):
        response = api.put("/api/queues/mail/policy", json=bad)
        assert response.status_code == 400, bad
        assert response.json()["error"] == "InvalidInput"
    assert web_app.queue("mail").policy().lease_ttl == 30  # unchanged


def test_workers__with_the_leases_each_holds(api: httpx.Client, web_app: App, backend: Any) -> None:
    worker = register(backend, "w-1", ("default", "mail"))
    web_app.enqueue("t", {})
    claim_one(backend, worker)
    [shown] = api.get("/api/workers").json()["workers"]
    assert shown["id"] == worker and shown["queues"] == ["default", "mail"]
    assert shown["hostname"] == "test-host" and shown["pid"] == 12345
    assert shown["leases"] == 1


BAD_REQUESTS = [
    ("GET", "/api/jobs?state=finished", None, 400),
    ("GET", "/api/jobs?limit=0", None, 400),
    ("GET", "/api/jobs?limit=ten", None, 400),
    ("GET", "/api/jobs?after=%00bad", None, 400),
    ("GET", "/api/jobs?queue=no%20spaces", None, 400),
    ("GET", "/api/queues/bad%20name/policy", None, 400),
    ("GET", "/api/queues/default/dead?after=zzz", None, 400),
    ("POST", "/api/jobs", b"{not json", 400),
    ("POST", "/api/jobs", b"[1, 2]", 400),
    ("POST", "/api/jobs", b'{"task": "t", "args": [1]}', 400),
    ("POST", "/api/jobs", b'{"task": ["t"]}', 400),
    ("POST", "/api/jobs", b'{"task": "t", "delay": -1}', 400),
    ("POST", "/api/jobs", b'{"task": "t", "colour": "red"}', 400),
    ("POST", "/api/queues/default/dead/retry", b"{}", 400),
    ("POST", "/api/queues/default/dead/retry", b'{"ids": "abc"}', 400),
    ("POST", "/api/queues/default/dead/retry", b'{"ids": [], "all": true}', 400),
    ("PUT", "/api/queues/default/policy", b'{"lease_ttl": "long"}', 400),
    ("DELETE", "/api/jobs", None, 405),
    ("GET", "/api/nothing", None, 404),
    ("GET", "/api/events?queue=bad%20name", None, 400),
    ("GET", "/api/events?after=zzz", None, 400),
]


def test_bad_input__gets_a_4xx_json_error(api: httpx.Client, web_app: App) -> None:
    for method, path, body, status in BAD_REQUESTS:
        response = api.request(method, path, content=body, headers=JSON_HEADERS)
        assert response.status_code == status, (method, path, body, response.text)
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()) == {"error", "message"} and response.json()["message"]
    assert web_app.jobs().jobs == []  # nothing was stored


def test_ids_as_an_object_or_delay_with_run_at__are_refused_clearly(
    api: httpx.Client, web_app: App
) -> None:
    retry = api.post("/api/queues/default/dead/retry", json={"ids": {"x": 1}})
    assert retry.status_code == 400 and "job ids must be a list of ids" in retry.json()["message"]
    both = api.post("/api/jobs", json={"task": "t", "delay": 5, "run_at": time.time() + 60})
    assert both.status_code == 400 and "delay or run_at, not both" in both.json()["message"]
    dots = api.post("/api/jobs", json={"task": "t", "queue": ".."})
    assert dots.status_code == 400 and "other than '.' and '..'" in dots.json()["message"]
    assert web_app.jobs().jobs == []  # nothing was stored


def test_bodies__must_be_json_and_small(api: httpx.Client, web_app: App) -> None:
    form = api.post("/api/jobs", content=b"task=t", headers={"content-type": "text/plain"})
    assert form.status_code == 415
    huge = api.post("/api/jobs", content=b"{" + b" " * (web_app.max_payload + 70_000) + b"}",
                    headers=JSON_HEADERS)  # fmt: skip
    assert huge.status_code == 413
    assert web_app.jobs().jobs == []  # nothing was stored


def test_importing_tenure__imports_no_web_framework() -> None:
    web = "{'starlette', 'uvicorn', 'jinja2', 'fastapi', 'pydantic', 'django'}"
    # tenure.contrib.django reads Django's settings when its App is first used, not before.
    code = ("import sys, tenure, tenure.cli, tenure.contrib.django;"
            f" print(sorted({web} & set(sys.modules)))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- workflows -----------------------------------------------------------------

FLOW = {"chain": [{"group": [{"task": "fetch", "args": {"n": 1}},
                             {"task": "fetch", "args": {"n": 2}, "may_fail": True}]},
                  {"task": "total", "queue": "sums", "priority": 3}]}  # fmt: skip


def test_workflow__started_read_and_cancelled(api: httpx.Client, web_app: App) -> None:
    started = post(api, "/api/workflows", {"flow": FLOW})
    assert started.status_code == 201
    wf = started.json()
    assert wf["id"].startswith("wf-") and wf["state"] == "running" and wf["many"] is False
    first, second, last = wf["jobs"]
    assert [j["state"] for j in wf["jobs"]] == ["queued", "queued", "waiting"]
    assert (second["args"], second["may_fail"]) == ({"n": 2}, True)
    assert (last["queue"], last["priority"]) == ("sums", 3)
    assert last["upstream"] == [first["id"], second["id"]] and wf["sinks"] == [last["id"]]
    assert {j["workflow"] for j in wf["jobs"]} == {wf["id"]}
    assert api.get(f"/api/workflows/{wf['id']}").json() == wf
    assert web_app.get_workflow(wf["id"]).jobs[2].id == last["id"]  # stored as it said
    cancelled = api.post(f"/api/workflows/{wf['id']}/cancel").json()
    assert cancelled["state"] == "cancelled"
    assert {j["state"] for j in cancelled["jobs"]} == {"cancelled"}
    again = api.post(f"/api/workflows/{wf['id']}/cancel")  # it ended: it stays as it is
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    other = post(api, "/api/workflows", {"flow": FLOW}).json()
    by_job_route = api.post(f"/api/jobs/{other['id']}/cancel").json()  # app.cancel's, too
    assert by_job_route["id"] == other["id"] and by_job_route["state"] == "cancelled"


def test_workflow_with_a_key__while_it_runs_is_the_same_one(api: httpx.Client) -> None:
    body = {"flow": {"task": "nightly"}, "key": "2026-12-05"}
    first, second = (post(api, "/api/workflows", body).json() for _ in range(2))
    assert second["id"] == first["id"] and second["key"] == "2026-12-05"


def test_workflow__unknown_id_is_404_and_a_bad_flow_400_saying_where(
    api: httpx.Client, web_app: App
) -> None:
    for path in ("/api/workflows/wf-00000000-0000-7000-8000-000000000000", "/api/workflows/x"):
        assert api.get(path).json()["error"] == "JobNotFound"
        assert api.post(path + "/cancel").status_code == 404
    bad = {
        "flow.chain[1]: a step takes": {"chain": [{"task": "a"}, {"tusk": "b"}]},
        "flow.group[0]: invalid task name": {"group": [{"task": "a b"}]},
        "takes a list and nothing else": {"chain": {"task": "a"}},
        "flow: a step takes": {"task": "a", "key": "k"},  # a step has no key of its own
    }
    for message, flow in bad.items():
        refused = post(api, "/api/workflows", {"flow": flow})
        assert refused.status_code == 400 and message in refused.json()["message"], refused.text
    deep = '{"flow": ' + '{"chain": [' * 500 + '{"task": "a"}' + "]}" * 500 + "}"
    refused = api.post("/api/workflows", content=deep, headers=JSON_HEADERS)
    assert refused.status_code == 400 and "nest at most" in refused.json()["message"]
    for body in ({}, {"flow": {"task": "a"}, "steps": []}):
        assert "a workflow is" in post(api, "/api/workflows", body).json()["message"]
    assert web_app.queues() == []  # nothing stored
