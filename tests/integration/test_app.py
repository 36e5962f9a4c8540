"""The public API: App, tasks, queues, jobs."""

import logging
import os
import subprocess
import sys
import warnings

import pytest

import tenure
from tenure import App, InvalidInput, JobNotFound, State


@pytest.fixture
def app(tmp_path):
    with App(f"sqlite:///{tmp_path / 'app.db'}") as a:
        yield a


def test_a_task_is_named_after_its_function_unless_told(app):
    @app.task
    def send_email(to: str) -> None: ...

    @app.task(name="mail.send", queue="mail", timeout=5, max_attempts=7, priority=3)
    def other(to: str) -> None: ...

    assert send_email.name == "send_email" and send_email.queue == "default"
    assert app.tasks["mail.send"] is other
    job = other.enqueue(to="a@x")
    assert (job.task, job.queue, job.timeout, job.max_attempts, job.priority) == (
        "mail.send", "mail", 5, 7, 3,
    )  # fmt: skip


def test_a_task_is_still_callable_directly(app):
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5


def test_registering_two_handlers_under_one_name__is_refused(app):
    app.task(name="x")(lambda: None)
    with pytest.raises(InvalidInput, match="already registered"):
        app.task(name="x")(lambda: None)


def test_bad_task_options__are_refused_at_registration(app):
    with pytest.raises(InvalidInput):
        app.task(queue="no spaces")(lambda: None)
    with pytest.raises(InvalidInput):
        app.task(name="t", timeout=-1)(lambda: None)


def test_enqueue_by_name_without_the_handler(app):
    job = app.enqueue("elsewhere.task", {"n": 1}, queue="q1", delay=60, key="k1")
    assert job.state is State.SCHEDULED
    assert app.get_job(job.id).args == {"n": 1}
    assert app.enqueue("elsewhere.task", {"n": 2}, queue="q1", key="k1").id == job.id


def test_enqueue_by_name__takes_the_concurrency_options_and_refuses_unknown_ones(app):
    job = app.enqueue("sync", {"n": 1}, concurrency_key="tenant-7", key="t7", debounce=30)
    assert (job.concurrency_key, job.state) == ("tenant-7", State.SCHEDULED)
    again = app.enqueue("sync", {"n": 2}, concurrency_key="tenant-7", key="t7", debounce=30)
    assert again.id == job.id and app.get_job(job.id).args == {"n": 2}
    with pytest.raises(InvalidInput, match=r"unknown option.*bogus"):
        app.enqueue("sync", {}, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(InvalidInput, match="debounce needs a key"):
        app.enqueue("sync", {}, debounce=1.0)


def test_enqueue_many__returns_jobs_in_order(app):
    @app.task
    def t(i: int) -> None: ...

    jobs = t.enqueue_many([{"i": i} for i in range(50)])
    assert [j.args["i"] for j in jobs] == list(range(50))
    assert app.queue().counts()[State.QUEUED] == 50
    assert t.enqueue_many([]) == []


def test_bad_input_stores_nothing(app):
    with pytest.raises(InvalidInput):
        app.enqueue_many("t", [{"ok": 1}, {"bad": {1, 2}}])
    with pytest.raises(InvalidInput):
        app.enqueue("t", {"x": "y" * (1024 * 1024)})
    assert app.queue().counts()[State.QUEUED] == 0


def test_max_payload_is_configurable(tmp_path):
    with (
        App(f"sqlite:///{tmp_path / 'p.db'}", max_payload=100) as small,
        pytest.raises(InvalidInput, match="max_payload"),
    ):
        small.enqueue("t", {"x": "y" * 200})


def test_get_job__of_an_unknown_id_is_job_not_found(app):
    with pytest.raises(JobNotFound):
        app.get_job("nope")


def test_queue_policy_is_stored_with_the_queue(app, tmp_path):
    q = app.queue("emails")
    assert q.policy() == tenure.QueuePolicy()
    q.set_policy(lease_ttl=4.0, heartbeat_interval=1.0)
    with App(app.url) as other:
        assert other.queue("emails").policy().lease_ttl == 4.0
    with pytest.raises(InvalidInput):
        q.set_policy(heartbeat_interval=3.0)
    assert q.policy().heartbeat_interval == 1.0
    assert "emails" in app.queues()


def test_cancel_and_the_dlq_from_the_app(app):
    job = app.enqueue("t", {})
    assert app.cancel(job.id).state is State.CANCELLED
    assert app.queue().dead().jobs == []
    assert app.queue().retry_dead() == 0


def test_the_url_defaults_to_tenure_url(monkeypatch, tmp_path):
    monkeypatch.setenv("TENURE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    with App() as a:
        a.enqueue("t", {})
    assert (tmp_path / "env.db").exists()


def test_a_bad_url_fails_at_construction():
    with pytest.raises(InvalidInput, match="accepted schemes"):
        App("ftp://x")


def test_current_job_outside_a_handler__is_an_error():
    with pytest.raises(tenure.TenureError, match="inside a running handler"):
        tenure.current_job()


def test_an_app_used_across_fork__reopens_in_the_child(app):
    app.enqueue("t", {})
    with warnings.catch_warnings():  # 3.12+ warns on fork with threads; that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's connection or portal thread
        try:
            app.enqueue("t", {})
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert app.queue().counts()[State.QUEUED] == 2


def test_an_app_left_open__closes_cleanly_at_exit(backend_url):
    code = "import sys, tenure; app = tenure.App(sys.argv[1]); app.queue('q').counts()"
    done = subprocess.run([sys.executable, "-c", code, backend_url], check=False,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_app_none_without_tenure_url__says_once_that_it_uses_a_local_file(
    tmp_path, monkeypatch, caplog
):
    import tenure.app

    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tenure.app, "_said_default", False)
    with caplog.at_level(logging.WARNING, logger="tenure"):
        first, second = App(None), App(None)
    said = [r.getMessage() for r in caplog.records if "TENURE_URL is not set" in r.getMessage()]
    assert said == [f"App(None) and TENURE_URL is not set: using sqlite:///tenure.db "
                    f"({tmp_path / 'tenure.db'}); set TENURE_URL or pass a URL"]  # fmt: skip
    assert first.url == second.url == "sqlite:///tenure.db"
    monkeypatch.setattr(tenure.app, "_said_default", False)
    monkeypatch.setenv("TENURE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    caplog.clear()
    App(None)
    assert not [r for r in caplog.records if "TENURE_URL" in r.getMessage()]
