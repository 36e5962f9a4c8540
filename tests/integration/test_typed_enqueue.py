"""Typed enqueue: arguments bound to the handler's parameters, options apart."""

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from tenure import App, InvalidInput, State, WorkerConfig
from tenure.worker import Supervisor

FAST = WorkerConfig(burst=True, idle_poll_min=0.005, idle_poll_max=0.05, pool="thread")


@pytest.fixture
def app(tmp_path):
    with App(f"sqlite:///{tmp_path / 't.db'}") as a:
        yield a


def test_positional_arguments__are_stored_by_name_and_reach_the_handler(app):
    @app.task
    def add(x: int, y: int, *, z: int = 0) -> int:
        return x + y + z

    job = add.enqueue(5, 6, z=1)
    assert job.args == {"x": 5, "y": 6, "z": 1}
    asyncio.run(Supervisor(app, FAST).run())
    assert app.get_job(job.id).result == 12


def test_an_option_passed_as_an_argument__is_refused_and_named(app):
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    with pytest.raises(InvalidInput, match=r"delay.*add\.with_options\(delay=\.\.\.\)"):
        add.enqueue(x=5, y=6, delay=3)  # type: ignore[call-arg]
    assert app.queue().counts()[State.QUEUED] == 0


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {"x": 1}), ((1, 2, 3), {}), ((1,), {"x": 1, "y": 2}), ((), {"x": 1, "w": 2})],
    ids=["missing", "too-many", "twice", "unknown"],
)
def test_arguments_that_do_not_bind__are_refused_at_enqueue(app, args, kwargs):
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    with pytest.raises(InvalidInput, match=r"arguments do not fit task 'add': add\(x: int"):
        add.enqueue(*args, **kwargs)
    if not args:
        with pytest.raises(InvalidInput, match="do not fit"):
            app.enqueue("add", kwargs)  # by name, when the task is registered here
    assert app.queue().counts()[State.QUEUED] == 0


def test_a_handler_with_kwargs__takes_any_keyword_and_refuses_extra_positionals(app):
    @app.task
    def log(event: str, **fields: object) -> None: ...

    assert log.enqueue("login", user="ann").args == {"event": "login", "user": "ann"}

    @app.task
    def total(*numbers: int) -> int:
        return sum(numbers)

    with pytest.raises(InvalidInput, match="'numbers' cannot take one"):
        total.enqueue(1, 2)


def test_with_options__returns_a_copy_whose_jobs_get_them(app):
    @app.task(queue="mail", priority=1)
    def send(to: str) -> None: ...

    later = send.with_options(delay=60, key="k1", priority=5, max_attempts=7, timeout=2.5)
    job = later.enqueue("a@x")
    assert (job.state, job.queue, job.priority, job.key) == (State.SCHEDULED, "mail", 5, "k1")
    assert (job.max_attempts, job.timeout, job.args) == (7, 2.5, {"to": "a@x"})
    assert job.run_at == pytest.approx(time.time() + 60, abs=5)
    assert later.with_options(queue="other").enqueue("b@x").key == "k1"
    plain = send.enqueue("c@x")  # the task itself is unchanged
    assert (plain.state, plain.priority, plain.key) == (State.QUEUED, 1, None)
    assert app.tasks["send"] is send


def test_with_options__checks_them_at_once(app):
    @app.task
    def send(to: str) -> None: ...

    with pytest.raises(InvalidInput, match="delay"):
        send.with_options(delay=-1)
    with pytest.raises(InvalidInput, match="queue"):
        send.with_options(queue="")


def test_enqueue_many__still_takes_a_list_of_keyword_dicts_and_checks_each(app):
    @app.task
    def send(to: str) -> None: ...

    jobs = send.enqueue_many([{"to": "a"}, {"to": "b"}], delay=5)
    assert [j.args for j in jobs] == [{"to": "a"}, {"to": "b"}]
    assert {j.state for j in jobs} == {State.SCHEDULED}
    with pytest.raises(InvalidInput, match="do not fit"):
        send.enqueue_many([{"to": "c"}, {"too": "d"}])
    assert app.queue().counts()[State.QUEUED] == 0


SAMPLE = """
import tenure

app = tenure.App("sqlite:///unused.db")

@app.task
def add(x: int, y: int) -> int:
    return x + y

add.enqueue(1, 2)
add.with_options(delay=3).enqueue(x=1, y=2)
add.enqueue("one", 2)
add.with_options(delay="soon")
"""


def test_mypy__reports_a_wrong_argument_type_to_enqueue(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(textwrap.dedent(SAMPLE))
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(sample)],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    lines = SAMPLE.splitlines()
    wrong_type, wrong_option = (
        lines.index('add.enqueue("one", 2)'),
        lines.index('add.with_options(delay="soon")'),
    )
    assert [e.split(": error:")[0] for e in errors] == [
        f"sample.py:{wrong_type + 1}",
        f"sample.py:{wrong_option + 1}",
    ], checked.stdout
    assert 'Argument 1 to "enqueue" of "Task" has incompatible type "str"' in errors[0]
    assert '"delay"' in errors[1]
