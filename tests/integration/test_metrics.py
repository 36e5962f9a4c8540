"""Prometheus metrics: a real worker's /metrics after a kill -9 of another
worker, the storage gauges over an App, the CLI's options, and that a worker
without metrics never imports them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families

from tenure import App, chain, group
from tenure.chaos.lab import Lab
from tenure.cli import cli
from tenure.core.workflows import Step
from tenure.job import JobSpec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, s.value


def scrape(port: int) -> str | None:
    """The worker's /metrics, or None while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            return str(reply.read().decode())
    except OSError:
        return None


def value(text: str, name: str, **labels: str) -> float | None:
    found = [v for n, ls, v in samples(text) if n == name and labels.items() <= ls.items()]
    return sum(found) if found else None


def test_a_worker_s_metrics__show_the_recovery_of_a_killed_worker_s_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    policy = {"lease_ttl": 1.0, "heartbeat_interval": 0.2, "sweep_interval": 0.1}
    with Lab(url, "metrics", **policy) as lab:
        doomed = lab.worker("--concurrency", "1", "--pool", "thread")
        job = lab.enqueue("chaos.sleep", seconds=30)
        lab.wait("the handler to start", lambda: lab.running_on(job.id))
        port = free_port()
        lab.worker("--concurrency", "1", "--pool", "thread", "--metrics-port", str(port))
        before = lab.wait("the survivor's /metrics", lambda: scrape(port), timeout=30)
        assert value(before, "tenure_recovery_seconds_count") is None  # nothing recovered yet
        assert value(before, "tenure_jobs", queue=lab.queue, state="active") == 1
        os.killpg(doomed.pid, signal.SIGKILL)

        def recovered() -> str | None:
            # The sweep counts its stall once its rescue returns; the claim that
            # recovers the job (a doorbell away) may come first: wait for both.
            text = scrape(port)
            count = text and value(text, "tenure_recovery_seconds_count", queue=lab.queue)
            stalls = text and value(text, "tenure_stalls_total", queue=lab.queue)
            return text if count and stalls else None

        text = lab.wait("the recovery in the histogram", recovered, timeout=10)
        assert lab.job(job.id).history[0].outcome == "crashed"
    assert value(text, "tenure_recovery_seconds_count", queue=lab.queue) == 1
    # from its last heartbeat (0.2 s apart) to the survivor's claim: the sweep
    # interval and a claim, not a lease's 1 s
    latency = value(text, "tenure_recovery_seconds_sum", queue=lab.queue)
    assert latency is not None and 0 < latency < 1.0
    assert value(text, "tenure_recovery_seconds_bucket", queue=lab.queue, le="+Inf") == 1
    assert value(text, "tenure_stalls_total", queue=lab.queue, detector="worker_gone") == 1
    assert value(text, "tenure_claimed_jobs_total", queue=lab.queue) == 1
    assert value(text, "tenure_jobs", queue=lab.queue, state="active") == 1
    assert value(text, "tenure_queue_lag_seconds", queue=lab.queue) == 0
    assert (value(text, "tenure_storage_calls_total", call="complete_and_claim") or 0) >= 1
    assert value(text, "tenure_storage_errors_total") is None  # none failed


def test_a_worker_s_metrics__time_a_workflow_s_fan_in(tmp_path: Path) -> None:
    with Lab(f"sqlite:///{tmp_path / 'fan_in.db'}", "fan_in") as lab:
        port = free_port()
        lab.worker("--concurrency", "2", "--pool", "thread", "--metrics-port", str(port))
        step = Step(JobSpec.create("chaos.sleep", {"seconds": 0}, queue=lab.queue))
        wf = lab.app.workflow(chain(group(step, step), step, step))
        lab.app.result(wf.id, timeout=30)
        later = Step(JobSpec.create("chaos.sleep", {"seconds": 0}, queue=lab.queue, delay=3600))
        lab.app.cancel(lab.app.workflow(chain(later, step)).id)

        def observed() -> str | None:
            text = scrape(port)
            return text if text and value(text, "tenure_fan_in_seconds_count") == 2 else None

        text = lab.wait("two fan-ins in the histogram", observed, timeout=10)
        # what Prometheus asks for first: every family once, metadata before samples
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text"}
        )
        with urllib.request.urlopen(request, timeout=2) as reply:
            families = list(openmetrics(reply.read().decode()))
    # the two steps after the group and after it; never the group's, which waited for none
    assert value(text, "tenure_fan_in_seconds_count", queue=lab.queue) == 2
    assert value(text, "tenure_claimed_jobs_total", queue=lab.queue) == 4
    latency = value(text, "tenure_fan_in_seconds_sum", queue=lab.queue)
    assert latency is not None and 0 <= latency < 2.0  # a wake-up and a claim, each
    assert value(text, "tenure_workflows_stored", state="completed") == 1
    # the counter of ended workflows: a TYPE of its own, beside the gauge
    assert value(text, "tenure_workflows_total", outcome="completed") == 1
    assert value(text, "tenure_workflows_total", outcome="cancelled") == 1
    assert value(text, "tenure_workflows_total", outcome="failed") == 0
    assert "# TYPE tenure_workflows_total counter" in text
    assert {"tenure_workflows", "tenure_workflows_stored"} <= {f.name for f in families}


def test_app_registry__reads_jobs_by_state_and_lag_from_storage(tmp_path: Path) -> None:
    from tenure.metrics import app_registry

    with App(f"sqlite:///{tmp_path / 'gauges.db'}") as app:
        app.enqueue("t", {}, queue="a", run_at=0.0)  # due since 1970
        app.enqueue("t", {}, queue="b", delay=60)
        app.workflow(chain(Step(JobSpec.create("t")), Step(JobSpec.create("t"))))
        registry = app_registry(app)
        jobs = {
            (ls["queue"], ls["state"]): v for n, ls, v in _collected(registry) if n == "tenure_jobs"
        }
        lags = {ls["queue"]: v for n, ls, v in _collected(registry)
                if n == "tenure_queue_lag_seconds"}  # fmt: skip
        workflows = {ls["state"]: v for n, ls, v in _collected(registry)
                     if n == "tenure_workflows_stored"}  # fmt: skip
    assert (jobs["a", "queued"], jobs["a", "scheduled"], jobs["b", "scheduled"]) == (1, 0, 1)
    assert workflows == {"running": 1, "completed": 0, "failed": 0, "cancelled": 0}
    assert lags["a"] > 1e9 and lags["b"] == 0


def _collected(registry: object) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client import generate_latest

    return list(samples(generate_latest(registry).decode()))  # type: ignore[arg-type]


# -- the CLI ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-port", "0"], "0 is not in the range 1<=x<=65535"),
        (["--metrics-port", "65536"], "65536 is not in the range"),
        (["--metrics-port", "http"], "'http' is not a valid integer"),
        (["--metrics-host", "0.0.0.0"], "--metrics-host needs --metrics-port"),
    ],
)
def test_bad_metrics_options__are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["worker", "tenure.chaos.tasks:app", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_metrics_port_in_use__stops_the_worker_with_one_error_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    (tmp_path / "busy_tasks.py").write_text(f"import tenure\napp = tenure.App({url!r})\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("TENURE_URL", None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tenure.cli", "worker", "busy_tasks:app", "--pool", "thread",
             "--metrics-port", str(port)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    )


def test_a_worker_without_metrics__never_imports_prometheus_client() -> None:
    code = textwrap.dedent("""
        import sys
        import tenure.cli.worker, tenure.worker.supervisor
        assert "prometheus_client" not in sys.modules and "tenure.metrics" not in sys.modules
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def worker_command(tmp_path: Path, *args: str, prelude: str = "") -> list[str]:
    """``tenure worker`` of a fresh App on SQLite, run by ``python -c`` after ``prelude``."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    (tmp_path / "w_tasks.py").write_text(f"import tenure\napp = tenure.App({url!r})\n")
    code = (f"{prelude}\nimport sys\nfrom tenure.cli import main\n"
            f"sys.argv = ['tenure', 'worker', 'w_tasks:app', '--pool', 'thread', *{args!r}]\n"
            "main()\n")  # fmt: skip
    return [sys.executable, "-c", code]


def worker_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("TENURE_URL", None)
    return env


def test_a_worker_s_metrics_port__answers_only_requests_addressed_to_localhost(
    tmp_path: Path,
) -> None:
    port = free_port()
    worker = subprocess.Popen(
        worker_command(tmp_path, "--metrics-port", str(port)), env=worker_env(tmp_path),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while scrape(port) is None:
            assert worker.poll() is None and time.monotonic() < deadline, "no /metrics"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/metrics"
        rebound = httpx.get(url, headers={"host": f"attacker.example:{port}"})  # DNS rebinding
        assert rebound.status_code == 403 and "localhost" in rebound.text
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]"):
            assert httpx.get(url, headers={"host": host}).status_code == 200, host
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)


def test_metrics_on_a_public_address__need_metrics_public(tmp_path: Path) -> None:
    refused = subprocess.run(
        worker_command(tmp_path, "--metrics-port", str(free_port()), "--metrics-host", "0.0.0.0"),
        env=worker_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: metrics on 0.0.0.0 could be read by anyone") and (
        "--metrics-public" in line
    )
    usage = CliRunner().invoke(cli, ["worker", "tenure.chaos.tasks:app", "--metrics-public"])
    assert usage.exit_code == 2 and "--metrics-public needs --metrics-port" in usage.output
    from tenure.metrics import MetricsServer

    public = MetricsServer(CollectorRegistry(), "0.0.0.0", 0)  # what --metrics-public serves
    try:
        url = f"http://127.0.0.1:{public.port}/metrics"
        assert httpx.get(url, headers={"host": "metrics.example"}).status_code == 200
    finally:
        public.close()


def test_metrics_without_prometheus_client__are_one_line_of_hint(tmp_path: Path) -> None:
    blocked = "import sys; sys.modules['prometheus_client'] = None  # as if not installed"
    done = subprocess.run(
        worker_command(tmp_path, "--metrics-port", str(free_port()), prelude=blocked),
        env=worker_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: tenure worker --metrics-port needs the web extra: pip install 'tenure[web]' "
        "(no module prometheus_client)"
    ]
