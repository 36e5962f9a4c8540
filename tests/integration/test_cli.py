"""The ``tenure`` command line, on a temporary SQLite database.

Most tests drive the click group in-process (CliRunner); the worker and the
console script itself run as real subprocesses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from tenure import chain, group
from tenure.app import App
from tenure.cli import cli
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import Step
from tenure.job import JobSpec

TENURE = Path(sys.executable).with_name("tenure")

APP_MODULE = """
    import tenure

    try:
        from tenure import App
    except ImportError:  # older tenure/__init__ without App
        from tenure.app import App

    app = App({url!r})


    @app.task
    def add(a: int, b: int) -> int:
        return a + b


    @app.task
    def boom() -> None:
        raise tenure.Fail("no [red]way[/red]")
"""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 't.db'}"


@pytest.fixture
def tenure(url: str) -> Any:
    """Run ``tenure --url <tmp db> ARGS...`` in-process; stdout and stderr kept apart.
    The database exists, empty (as after a first enqueue or worker)."""
    app = App(url)
    assert app.backend is not None  # opened, hence created
    app.close()

    def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
        return CliRunner().invoke(cli, ["--url", url, *args], env=env)

    return invoke


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def enqueue(tenure: Any, task: str, *args: str) -> str:
    job_id, state = ok(tenure("enqueue", task, *args)).stdout.split()
    assert state in ("queued", "scheduled")
    return str(job_id)


def assert_one_line_error(result: Result, *fragments: str, code: int = 1) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def run_worker(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tasks_mod.py").write_text(textwrap.dedent(APP_MODULE.format(url=url)))
    env = {k: v for k, v in os.environ.items() if k != "TENURE_URL"}
    return subprocess.run(
        [str(TENURE), "worker", "tasks_mod:app", "--burst", *args],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- producers -------------------------------------------------------------


def test_enqueue_then_status__counts_jobs_per_queue_and_state(tenure: Any) -> None:
    enqueue(tenure, "send_email", "--args", '{"to": "a@example.com"}')
    enqueue(tenure, "send_email", "--args", '{"to": "b@example.com"}', "--priority", "5")
    enqueue(tenure, "report", "--queue", "emails", "--delay", "60")

    counts = as_json(tenure("status", "--json"))
    assert counts["default"]["queued"] == 2
    assert counts["emails"] == {
        "waiting": 0, "scheduled": 1, "queued": 0, "active": 0, "completed": 0, "dead": 0,
        "cancelled": 0,
    }  # fmt: skip
    table = ok(tenure("status")).stdout
    assert "default" in table
    assert "emails" in table
    assert "scheduled" in table


def test_status_on_empty_storage__says_there_are_no_queues(tenure: Any) -> None:
    assert ok(tenure("status")).stdout.splitlines()[1:] == ["no queues yet"]


def test_commands_that_store_nothing__do_not_create_a_mistyped_database(
    tmp_path: Path, url: str
) -> None:
    typo = tmp_path / "typo.db"
    for args in (["status"], ["jobs"], ["job", "x"], ["cancel", "x"], ["policy", "get"],
                 ["dlq", "list"], ["dlq", "retry", "--queue", "q", "--all"]):  # fmt: skip
        result = CliRunner().invoke(cli, ["--url", f"sqlite:///{typo}", *args])
        assert_one_line_error(result, f"SQLite database {typo} does not exist")
    assert list(tmp_path.iterdir()) == []
    ok(CliRunner().invoke(cli, ["--url", f"sqlite:///{typo}", "enqueue", "t"]))
    assert typo.exists()


def test_enqueue_with_a_key_twice__returns_the_first_job(tenure: Any) -> None:
    first = enqueue(tenure, "charge", "--key", "order-1")
    assert enqueue(tenure, "charge", "--key", "order-1") == first


def test_enqueue_options__are_stored_on_the_job(tenure: Any) -> None:
    job_id = enqueue(tenure, "t", "--args", '{"n": 1}', "--priority", "7", "--max-attempts",
                     "9", "--timeout", "2.5", "--queue", "q1")  # fmt: skip
    job = as_json(tenure("job", job_id, "--json"))
    assert (job["queue"], job["args"], job["priority"]) == ("q1", {"n": 1}, 7)
    assert (job["max_attempts"], job["timeout"]) == (9, 2.5)


def test_url__is_read_from_tenure_url_when_not_given(tmp_path: Path) -> None:
    env = {"TENURE_URL": f"sqlite:///{tmp_path / 'env.db'}"}
    ok(CliRunner().invoke(cli, ["enqueue", "x"], env=env))
    assert (tmp_path / "env.db").exists()


def test_jobs__lists_jobs_newest_first_and_pages_with_a_cursor(tenure: Any) -> None:
    ids = [enqueue(tenure, "t", "--args", json.dumps({"i": i})) for i in range(3)]

    table = ok(tenure("jobs")).stdout
    assert all(i in table for i in ids)
    first = as_json(tenure("jobs", "--limit", "2", "--json"))
    assert [j["id"] for j in first["jobs"]] == ids[:0:-1]
    assert first["next_cursor"] is not None
    rest = as_json(tenure("jobs", "--limit", "2", "--after", first["next_cursor"], "--json"))
    assert [j["id"] for j in rest["jobs"]] == ids[:1]
    assert rest["next_cursor"] is None
    assert "next cursor:" in ok(tenure("jobs", "--limit", "2")).stdout


def test_jobs__filters_by_queue_and_state(tenure: Any) -> None:
    a = enqueue(tenure, "t")
    b = enqueue(tenure, "t", "--queue", "other", "--delay", "30")
    assert [j["id"] for j in as_json(tenure("jobs", "-q", "other", "--json"))["jobs"]] == [b]
    assert [j["id"] for j in as_json(tenure("jobs", "-s", "queued", "--json"))["jobs"]] == [a]
    assert ok(tenure("jobs", "-s", "dead")).stdout.strip() == "no jobs"


def test_cancel__cancels_a_queued_job_and_refuses_twice(tenure: Any) -> None:
    job_id = enqueue(tenure, "t")
    assert ok(tenure("cancel", job_id)).stdout.split() == [job_id, "cancelled"]
    assert_one_line_error(tenure("cancel", job_id), "cancelled")


def test_workflow__prints_its_steps_in_order_and_cancels_by_its_id(tenure: Any, url: str) -> None:
    fetch, total = (Step(JobSpec.create(task, {"n": 1})) for task in ("fetch", "total"))
    with App(url) as app:
        wf = app.workflow(chain(group(fetch, fetch, fetch), total, Step(JobSpec.create("mail"))))
    lines = ok(tenure("workflow", wf.id)).stdout.splitlines()
    assert lines[0].split() == ["id", wf.id] and lines[1].split() == ["state", "running"]
    assert "2 waiting, 3 queued" in lines[5] and lines[6].split() == ["result", "of", "steps", "5"]
    rows = [line.split() for line in lines if line.split()[:1] in (["4"], ["5"])]
    assert rows[0][:6] == ["4", "total", "waiting", "0", "-", "1-3"]  # indented: after the group
    assert rows[1][:6] == ["5", "mail", "waiting", "0", "-", "4"]
    shown = as_json(tenure("workflow", wf.id, "--json"))
    assert shown["id"] == wf.id and [j["task"] for j in shown["jobs"]][-2:] == ["total", "mail"]
    step = [line.split() for line in ok(tenure("job", wf.jobs[3].id)).stdout.splitlines()]
    assert ["workflow", wf.id] in step and ["waits", "for", f"{wf.jobs[0].id},"] in step
    assert ok(tenure("cancel", wf.id)).stdout.split() == [wf.id, "cancelled"]
    assert "5 cancelled" in ok(tenure("workflow", wf.id)).stdout
    assert_one_line_error(tenure("workflow", "wf-nope"), "wf-nope")


def test_a_failed_workflow__names_the_step_to_retry(tenure: Any, tmp_path: Path, url: str) -> None:
    with App(url) as app:
        wf = app.workflow(chain(Step(JobSpec.create("boom")), Step(JobSpec.create("add"))))
    assert run_worker(tmp_path, url).returncode == 0
    shown = ok(tenure("workflow", wf.id)).stdout
    words = " ".join(shown.split())  # as a narrow terminal may wrap it
    assert "state failed" in words
    boom = wf.jobs[0].id
    assert f"failed at step 1, boom: dead (error); 'tenure dlq retry {boom}' resumes it" in words
    assert "cancelled (upstream_failed)" in shown


# -- the worker and the DLQ --------------------------------------------------


def test_worker_in_burst_mode__completes_the_jobs_and_exits(
    tenure: Any, tmp_path: Path, url: str
) -> None:
    ids = [enqueue(tenure, "add", "--args", json.dumps({"a": i, "b": 1})) for i in range(3)]

    done = run_worker(tmp_path, url, "--concurrency", "2")

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "started" in done.stderr  # INFO logging to stderr
    jobs = [as_json(tenure("job", i, "--json")) for i in ids]
    assert [(j["state"], j["result"]) for j in jobs] == [("completed", i + 1) for i in range(3)]
    shown = ok(tenure("job", ids[0])).stdout
    assert "completed" in shown
    assert "history" in shown


def test_dlq__list_show_retry_and_purge(tenure: Any, tmp_path: Path, url: str) -> None:
    done_id = enqueue(tenure, "add", "--args", '{"a": 1, "b": 2}')
    failed = enqueue(tenure, "boom")
    unknown = enqueue(tenure, "not_a_task")
    ok(tenure("policy", "set", "unknown_task_grace=0"))  # no rolling deploy to wait for
    assert run_worker(tmp_path, url).returncode == 0

    listed = as_json(tenure("dlq", "list", "--json"))["jobs"]
    assert {j["id"] for j in listed} == {failed, unknown}
    assert {j["dead_reason"] for j in listed} == {"error", "unknown_task"}
    table = ok(tenure("dlq", "list", "--queue", "default")).stdout
    assert failed in table
    assert "unknown task 'not_a_task'" in table

    shown = ok(tenure("dlq", "show", failed)).stdout
    assert "Traceback (most recent call last)" in shown  # the full last error
    assert "Fail: no [red]way[/red]" in shown  # printed as text, never as markup
    assert "history" in shown
    assert_one_line_error(tenure("dlq", "show", done_id), "not dead")

    assert ok(tenure("dlq", "retry", failed)).stdout.strip() == "retried 1 dead job(s)"
    assert as_json(tenure("job", failed, "--json"))["state"] == "queued"
    assert_one_line_error(tenure("dlq", "retry", failed), "not dead")
    assert_one_line_error(tenure("dlq", "retry", "--queue", "other", unknown), "not 'other'")

    assert_one_line_error(tenure("dlq", "purge"), "--yes", code=2)
    assert ok(tenure("dlq", "purge", unknown)).stdout.strip() == "purged 1 dead job(s)"
    assert_one_line_error(tenure("job", unknown), "no job with id")

    assert run_worker(tmp_path, url).returncode == 0  # boom dies again
    # Every dead job at once only when asked for, as purge's --yes.
    assert_one_line_error(tenure("dlq", "retry"), "pass --all", code=2)
    assert_one_line_error(tenure("dlq", "retry", "-q", "default"), "pass --all", code=2)
    assert_one_line_error(tenure("dlq", "retry", "--all", failed), "not both", code=2)
    assert as_json(tenure("job", failed, "--json"))["state"] == "dead"
    done = tenure("dlq", "retry", "-q", "default", "--all")
    assert ok(done).stdout.strip() == "retried 1 dead job(s)"
    assert run_worker(tmp_path, url).returncode == 0
    assert ok(tenure("dlq", "purge", "--yes")).stdout.strip() == "purged 1 dead job(s)"
    assert ok(tenure("dlq", "list")).stdout.strip() == "no dead jobs"


# -- policy ------------------------------------------------------------------


def test_policy_set_then_get__round_trips(tenure: Any) -> None:
    ok(tenure("policy", "set", "-q", "emails", "lease_ttl=5", "delivery=at-most-once",
              "timeout=null", "max_attempts=7", "keep_completed=null", "keep_dead=0"))  # fmt: skip

    defaults = as_json(tenure("policy", "get", "--json"))
    assert defaults["delivery"] == "at-least-once"
    assert (defaults["keep_completed"], defaults["keep_dead"]) == (86_400, 14 * 86_400)
    got = as_json(tenure("policy", "get", "-q", "emails", "--json"))
    assert got == {**defaults, "lease_ttl": 5, "delivery": "at-most-once", "max_attempts": 7,
                   "keep_completed": None, "keep_dead": 0}  # fmt: skip
    assert as_json(tenure("policy", "get", "--json")) == defaults  # other queues untouched
    table = ok(tenure("policy", "get", "--queue", "emails")).stdout
    assert "at-most-once" in table
    assert "lease_ttl" in table


@pytest.mark.parametrize(
    ("args", "fragment", "code"),
    [
        (["nope=1"], "unknown policy field(s): nope", 1),
        (["lease_ttl=abc"], "lease_ttl must be a number of seconds", 1),
        (["heartbeat_interval=10"], "at most half of lease_ttl", 1),
        (["delivery=sometimes"], "delivery must be one of", 1),
        (["keep_dead=-1"], "keep_dead must be a number of seconds within [0, ", 1),
        (["lease_ttl"], "expected FIELD=VALUE", 2),
        ([], "Missing argument", 2),
    ],
)
def test_policy_set_with_a_bad_field_or_value__is_one_clear_error(
    tenure: Any, args: list[str], fragment: str, code: int
) -> None:
    assert_one_line_error(tenure("policy", "set", *args), fragment, code=code)
    assert as_json(tenure("policy", "get", "--json"))["lease_ttl"] == 15.0


# -- errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment", "code"),
    [
        (["enqueue", "t", "--args", "{bad"], "not valid JSON", 2),
        (["enqueue", "t", "--args", "[1, 2]"], "must be a JSON object", 2),
        (["enqueue", "t", "--queue", "bad queue!"], "invalid queue name", 1),
        (["enqueue", "bad task!"], "invalid task name", 1),
        (["enqueue", "t", "--delay", "-1"], "delay must be", 1),
        (["enqueue"], "Missing argument 'TASK'", 2),
        (["jobs", "--queue", "no/slash"], "invalid queue name", 1),
        (["jobs", "--state", "weird"], "'weird' is not one of", 2),
        (["jobs", "--after", "x"], "bad cursor", 1),
        (["job", "nope"], "no job with id 'nope'", 1),
        (["dlq", "show", "nope"], "no job with id 'nope'", 1),
        (["dlq", "retry", "nope"], "no job with id 'nope'", 1),
        (["cancel", "nope"], "no job with id 'nope'", 1),
        (["no-such-command"], "No such command", 2),
        (["worker", "json"], "expected MODULE:APP", 2),
        (["worker", "no_such_module_xyz:app"], "no module named 'no_such_module_xyz'", 1),
        (["worker", "json:nope"], "has no attribute 'nope'", 1),
        (["worker", "json:dumps"], "not a tenure App", 1),
    ],
)
def test_a_bad_command__exits_non_zero_with_one_line(
    tenure: Any, args: list[str], fragment: str, code: int
) -> None:
    assert_one_line_error(tenure(*args), fragment, code=code)


@pytest.mark.parametrize(
    ("url", "fragment", "reading"),
    [
        ("sqlite:////nonexistent/dir/x.db", "does not exist", "does not exist"),
        ("sqlite:////proc/x.db", "cannot open SQLite database", "does not exist"),
        ("redis://127.0.0.1:1/0", "Redis at", "Redis at"),
        ("nonsense", "malformed backend URL", "malformed backend URL"),
    ],
)
def test_unusable_storage__exits_non_zero_with_one_line(
    url: str, fragment: str, reading: str
) -> None:
    assert_one_line_error(CliRunner().invoke(cli, ["--url", url, "enqueue", "t"]), fragment)
    for args in (["status"], ["jobs"], ["policy", "get"]):
        assert_one_line_error(CliRunner().invoke(cli, ["--url", url, *args]), reading)


def test_every_command__has_help_with_a_one_line_description() -> None:
    def walk(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command]]:
        found: list[tuple[list[str], click.Command]] = [(path, group)]
        ctx = click.Context(group)
        for name in group.list_commands(ctx):  # the root group imports each when asked
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                found += walk(command, [*path, name])
            else:
                found.append(([*path, name], command))
        return found

    commands = walk(cli, [])
    assert len(commands) >= 14
    for path, command in commands:
        result = ok(CliRunner().invoke(cli, [*path, "--help"]))
        assert result.stdout.startswith("Usage: ")
        assert command.get_short_help_str(), path


def test_a_group_without_a_command__prints_its_help_not_an_error() -> None:
    for args in ([], ["dlq"], ["policy"]):
        result = CliRunner().invoke(cli, args)
        assert "Usage: " in result.output
        assert "error:" not in result.output


# -- the console script ------------------------------------------------------


def test_console_script__enqueues_reports_and_fails_in_one_line(url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TENURE), *args], check=False, capture_output=True, text=True, timeout=60
        )

    enqueued = run("--url", url, "enqueue", "t", "--args", '{"x": 1}')
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.split()[0]
    assert job_id in run("--url", url, "jobs").stdout

    for args in (
        ["--url", "sqlite:////nonexistent/dir/x.db", "status"],
        ["--url", url, "job", "nope"],
        ["--url", url, "enqueue", "t", "--args", "{"],
    ):
        failed = run(*args)
        assert failed.returncode in (1, 2)
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert failed.stderr.startswith("error: ")
        assert "Traceback" not in failed.stderr


# -- the App: --app, TENURE_APP ---------------------------------------------


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write an importable module holding an App on ``url``; its ``module:app`` path."""
    names: list[str] = []
    monkeypatch.chdir(tmp_path)  # the CLI imports from the current directory

    def write(url: str) -> str:
        name = f"tasks_{tmp_path.name.replace('-', '_')}_{len(names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP_MODULE.format(url=url)))
        names.append(name)
        return f"{name}:app"

    yield write
    for name in names:
        sys.modules.pop(name, None)


def status_line(result: Result) -> str:
    return ok(result).stdout.splitlines()[0]


def test_app_option__its_url_applies_to_every_command(
    app_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'app.db'}"
    path = app_module(url)
    runner = CliRunner()
    ok(runner.invoke(cli, ["--app", path, "enqueue", "add", "--args", '{"a": 1, "b": 2}']))
    shown = ok(runner.invoke(cli, ["--app", path, "status"])).stdout
    assert shown.splitlines()[0] == f"storage: {url} (from the App {path})"
    assert "default" in shown
    env = {"TENURE_APP": path}
    assert as_json(runner.invoke(cli, ["jobs", "--json"], env=env))["jobs"][0]["task"] == "add"
    done = runner.invoke(cli, ["worker", "--burst", "--pool", "thread"], env=env)
    assert done.exit_code == 0, done.stderr
    assert as_json(runner.invoke(cli, ["status", "--json"], env=env))["default"]["completed"] == 1
    assert not (tmp_path / "tenure.db").exists()


def test_url_precedence__url_then_tenure_url_then_the_app(
    app_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    urls = {n: f"sqlite:///{tmp_path / n}.db" for n in ("flag", "env", "app")}
    for url in urls.values():
        with App(url) as made:  # created, so that reading commands open it
            made.queues()
    path = app_module(urls["app"])
    runner = CliRunner()
    env = {"TENURE_URL": urls["env"]}
    line = status_line(
        runner.invoke(cli, ["--app", path, "--url", urls["flag"], "status"], env=env)
    )
    assert line == f"storage: {urls['flag']} (from --url)"
    line = status_line(runner.invoke(cli, ["--app", path, "status"], env=env))
    assert line == f"storage: {urls['env']} (from TENURE_URL)"
    line = status_line(runner.invoke(cli, ["--app", path, "status"]))
    assert line == f"storage: {urls['app']} (from the App {path})"


def test_status__masks_the_password_of_the_storage_it_names(
    app_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    path = app_module("redis://:s3cret@127.0.0.1:1/0")
    result = CliRunner().invoke(cli, ["--app", path, "status"])
    assert result.stdout.splitlines()[0].startswith("storage: redis://:***@127.0.0.1:1/0")
    assert "s3cret" not in result.output


def test_enqueue_with_app__applies_the_tasks_defaults_and_parameters(
    app_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    path = app_module(f"sqlite:///{tmp_path / 'd.db'}")
    runner = CliRunner()
    bad = runner.invoke(cli, ["--app", path, "enqueue", "add", "--args", '{"a": 1, "delay": 3}'])
    assert_one_line_error(bad, "arguments do not fit task 'add'", "with_options(delay=...)")


def test_a_bad_app_path__is_one_line(app_module: Any) -> None:
    result = CliRunner().invoke(cli, ["--app", "no_such_module:app", "status"])
    assert_one_line_error(result, "--app: cannot import 'no_such_module'")


def test_enqueue_with_app_of_a_task_it_does_not_define__is_refused_naming_the_closest(
    app_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'd.db'}"
    path = app_module(url)
    runner = CliRunner()
    typo = runner.invoke(cli, ["--app", path, "enqueue", "adds"])
    assert_one_line_error(typo, "defines no task 'adds'", "did you mean 'add'?", "--any-task")
    far = runner.invoke(cli, ["enqueue", "zzz"], env={"TENURE_APP": path})
    assert_one_line_error(far, "defines no task 'zzz'", "its tasks: add, boom")
    assert not (tmp_path / "d.db").exists()  # nothing was stored
    newer = runner.invoke(cli, ["--app", path, "enqueue", "adds", "--any-task"])
    assert ok(newer).stdout.split()[1] == "queued"
    # Without an App, a task by any name is enqueued, as a producer's is.
    bare = runner.invoke(cli, ["--url", url, "enqueue", "zzz"])
    assert ok(bare).stdout.split()[1] == "queued"


def test_help__says_what_each_default_is_in_plain_text() -> None:
    enqueue_help = ok(CliRunner().invoke(cli, ["enqueue", "--help"])).stdout
    assert "the task's own queue" in " ".join(enqueue_help.split())
    policy_help = ok(CliRunner().invoke(cli, ["policy", "set", "--help"])).stdout
    assert "``" not in policy_help
    assert "tenure policy set lease_ttl=5" in policy_help


# -- ids ----------------------------------------------------------------------


def store_with_ids(url: str, *ids: str) -> None:
    with App(url) as app:
        app.store([dataclasses.replace(JobSpec.create("t"), id=i) for i in ids])


def test_an_id_prefix_of_8_characters_or_more__names_its_job_everywhere(
    tenure: Any, url: str
) -> None:
    a, b = "2367cbe5-ab54-7000-8000-000000000001", "2367cbe5-ab99-7000-8000-000000000002"
    store_with_ids(url, a, b)
    assert as_json(tenure("job", "2367cbe5-ab54", "--json"))["id"] == a
    assert as_json(tenure("job", "2367cbe5ab99", "--json"))["id"] == b  # dashes left out
    assert a in ok(tenure("job", a[:13])).stdout
    assert ok(tenure("cancel", b[:14])).stdout.strip() == f"{b} cancelled"
    ambiguous = tenure("job", "2367cbe5")
    assert_one_line_error(ambiguous, "'2367cbe5' is ambiguous", a, b)
    assert_one_line_error(tenure("job", "2367cbe5-ab77"), "nor one whose id begins with it")
    assert_one_line_error(tenure("job", "2367cbe"), "no job with id '2367cbe'")  # too short


def test_dlq_commands__take_id_prefixes(tenure: Any, url: str) -> None:
    dead = "5ad0beef-0000-7000-8000-000000000001"
    store_with_ids(url, dead)
    with App(url) as app:
        worker = app.call(app.backend.claim("w", ["default"], 1))[0]
        fate = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
        app.call(app.backend.fail(worker.id, worker.fence, Outcome.ERROR, "boom", fate))
    assert dead in ok(tenure("dlq", "show", dead[:8])).stdout
    assert ok(tenure("dlq", "retry", dead[:8], dead)).stdout.strip() == "retried 1 dead job(s)"
    assert as_json(tenure("job", dead, "--json"))["state"] == "queued"


def test_dlq_retry__numbers_attempts_on_and_records_that_the_cli_retried(
    tenure: Any, url: str
) -> None:
    dead = "5ad0beef-0000-7000-8000-000000000002"
    store_with_ids(url, dead)
    with App(url) as app:
        claimed = app.call(app.backend.claim("w", ["default"], 1))[0]
        fate = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
        app.call(app.backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "boom", fate))
    ok(tenure("dlq", "retry", dead))
    events = [json.loads(line) for line in ok(tenure("events", "--json")).stdout.splitlines()]
    assert events[-1]["kind"] == "retried"
    assert events[-1]["data"] == {"by": "cli", "attempts": 1}
    shown = ok(tenure("job", dead)).stdout
    assert "1 (0 of 3 since its retry from the DLQ)" in shown
    with App(url) as app:
        again = app.call(app.backend.claim("w", ["default"], 1))[0]
    assert again.attempts == 2  # numbered on
