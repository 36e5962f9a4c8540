"""tenure.contrib.django in a real Django project, built as a reader would:
``django-admin startproject``, an app, and the files of docs/howto/django.md
as written, on SQLite and on PostgreSQL. An order and its job commit together
or not at all (and with tenure's storage elsewhere, the job is stored at the
commit); a worker started by ``manage.py tenure worker`` runs the job;
the page's tests pass under Django's test runner and under pytest-django;
``manage.py check`` reports a bad setting; the dashboard mounted in the
project's ASGI app is for its staff only."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

import tenure
from tests.conftest import fresh_storage_url
from tests.servers import PostgresServer, free_port, wait_port

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "howto" / "django.md"
FILE_BLOCK = re.compile(r"^```python\n(# ([\w/]+\.py)\b[^\n]*\n.*?)^```$", re.MULTILINE | re.DOTALL)

SCENARIO = """
import json, os, sys
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()
from django.db import transaction

from orders.models import Order
from orders.services import place_order
from orders.tasks import send_receipt
from tenure import JobNotFound
from tenure.contrib.django import app


class Undo(Exception):
    pass


try:
    with transaction.atomic():
        undone = send_receipt.enqueue(Order.objects.create(total=1).id)
        raise Undo
except Undo:
    pass
with transaction.atomic():
    order = Order.objects.create(total=2)
    job = send_receipt.enqueue(order.id)
    try:  # tenure's own connection cannot see it yet: it is in Django's transaction
        app.get_job(job.id)
        seen_before_commit = True
    except JobNotFound:
        seen_before_commit = False
try:
    app.get_job(undone.id)
    undone_stored = True
except JobNotFound:
    undone_stored = False
totals = list(Order.objects.values_list("total", flat=True))
import tenure

flows = {}
for commits in (False, True):
    try:
        with transaction.atomic():
            flow = app.workflow(tenure.chain(send_receipt.step(1), send_receipt.step(2)))
            if not commits:
                raise Undo
    except Undo:
        pass
    try:
        flows[commits] = [j.state for j in app.get_workflow(flow.id).jobs]
    except JobNotFound:
        flows[commits] = None
json.dump({"url": app.url, "job": job.id, "orders": totals,
           "seen_before_commit": seen_before_commit, "undone_stored": undone_stored,
           "state": app.get_job(job.id).state, "flows": [flows[False], flows[True]]}, sys.stdout)
"""


CHAIN = """
from django.test import TestCase

from orders.models import Order
from tenure.contrib.django import app
from tenure.testing import drain


@app.task
def first(n: int) -> None:
    Order.objects.create(total=n)
    second.enqueue(n + 1)  # held in the test's transaction, as the test's own


@app.task
def second(n: int) -> None:
    Order.objects.create(total=n)


class ChainTests(TestCase):
    def test_a_handlers_job__runs_in_the_same_drain(self) -> None:
        first.enqueue(1)
        done = drain(app)
        assert (done.completed, done.dead) == (2, 0), done
        assert sorted(Order.objects.values_list("total", flat=True)) == [1, 2]
"""


def doc_files() -> dict[str, str]:
    return {name: code for code, name in FILE_BLOCK.findall(DOC.read_text())}


def manage(project: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=environment(),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENURE_", "DJANGO_"))}
    return env | {"PYTHONDEVMODE": "1"}


def build(root: Path, database: str | None) -> Path:
    """The shop of docs/howto/django.md, migrated: SQLite, or the PostgreSQL ``database``."""
    root.mkdir()
    django_admin = [sys.executable, "-m", "django", "startproject", "shop", str(root)]
    subprocess.run(django_admin, check=True, capture_output=True, timeout=60, env=environment())
    manage(root, "startapp", "orders")
    for name, code in doc_files().items():
        path = root / name
        path.write_text(path.read_text() + "\n" + code if name.endswith("settings.py") else code)
    if database is not None:
        url = urlsplit(database)
        with (root / "shop" / "settings.py").open("a") as settings:
            settings.write(
                f"DATABASES = {{'default': {{'ENGINE': 'django.db.backends.postgresql', "
                f"'NAME': {url.path[1:]!r}, 'USER': {url.username!r}, "
                f"'HOST': {url.hostname!r}, 'PORT': {url.port!r}}}}}\n"
            )
    manage(root, "makemigrations", "orders")
    manage(root, "migrate")
    return root


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project per backend for the module's tests (building one takes
    seconds); the worker's test alone writes to its own database, the
    others to test databases of their own, or to other tables."""
    root = tmp_path_factory.mktemp(request.param)
    database = None
    if request.param == "postgres":
        database = fresh_storage_url("postgres", request, root)
    return build(root / "shop", database)


@contextmanager
def running(command: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(command, cwd=cwd, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def orders(shop: Path, url: str) -> list[tuple[int, bool]]:
    """The orders' rows, read by the test itself."""
    if url.startswith("sqlite"):
        with sqlite3.connect(shop / "db.sqlite3") as db:
            rows = db.execute("SELECT total, receipt_sent FROM orders_order").fetchall()
        return [(total, bool(sent)) for total, sent in rows]
    import psycopg

    conninfo = url.split("?", maxsplit=1)[0]
    with psycopg.connect(conninfo) as conn:
        return list(conn.execute("SELECT total, receipt_sent FROM orders_order").fetchall())


def test_an_order_and_its_job__commit_together__and_manage_py_tenure_worker_runs_it(
    shop: Path,
) -> None:
    (shop / "scenario.py").write_text(SCENARIO)
    done = subprocess.run([sys.executable, "scenario.py"], cwd=shop, env=environment(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["orders"] == [2], seen  # the rolled-back order is gone...
    assert seen["undone_stored"] is False  # ...and so is its job
    assert seen["seen_before_commit"] is False and seen["state"] == "queued", seen
    assert seen["flows"] == [None, ["queued", "waiting"]], seen  # a workflow alike
    url = seen["url"]
    work = [sys.executable, "manage.py", "tenure", "worker", "-c", "1"]
    with running(work, shop) as worker, tenure.App(url) as app:
        assert isinstance(app.result(seen["job"], timeout=60), int)  # the order's id
        assert orders(shop, url) == [(2, True)]
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert app.queue("receipts").policy().max_attempts == 5  # TENURE["QUEUES"], at its start
    listed = manage(shop, "tenure", "jobs", "--json")
    assert seen["job"] in listed.stdout
    called = "from django.core.management import call_command; call_command('tenure', 'status')"
    assert "receipts" in manage(shop, "shell", "-c", called).stdout


DEFERRED = """
import json, os, sys
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()
from django.db import transaction

from orders.tasks import send_receipt
from tenure import JobNotFound
from tenure.contrib.django import app


def stored(job_id):
    try:
        return app.get_job(job_id).state
    except JobNotFound:
        return None


try:
    with transaction.atomic():
        undone = send_receipt.enqueue(0)
        raise RuntimeError
except RuntimeError:
    pass
with transaction.atomic():
    job = send_receipt.enqueue(0)
    inside = stored(job.id)
    import tenure

    flow = app.workflow(tenure.chain(send_receipt.step(1), send_receipt.step(2)))
json.dump({"url": app.url, "undone": stored(undone.id), "inside": inside,
           "after": stored(job.id), "flow": app.get_workflow(flow.id).state}, sys.stdout)
"""


def test_storage_elsewhere__gets_the_job_at_the_commit(shop: Path, tmp_path: Path) -> None:
    (shop / "deferred.py").write_text(DEFERRED)
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    env = environment() | {"TENURE_URL": elsewhere}
    done = subprocess.run([sys.executable, "deferred.py"], cwd=shop, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"url": elsewhere, "undone": None, "inside": None, "after": "queued",
                    "flow": "running"}, seen  # fmt: skip


def test_the_pages_tests__pass_under_djangos_test_runner(shop: Path) -> None:
    (shop / "orders" / "test_chain.py").write_text(CHAIN)
    done = manage(shop, "test", "orders", check=False)
    assert done.returncode == 0, done.stderr
    assert "Ran 3 tests" in done.stderr and "OK" in done.stderr, done.stderr


def test_the_pages_pytest_tests__pass_under_pytest_django(shop: Path) -> None:
    pytest.importorskip("pytest_django")
    (shop / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = shop.settings\n")
    run = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_django.plugin",
           "orders/test_receipts.py"]  # fmt: skip
    alone = environment() | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the others take seconds
    done = subprocess.run(run, cwd=shop, env=alone, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout


def test_manage_py_check__reports_a_bad_tenure_setting(tmp_path: Path) -> None:
    shop = build(tmp_path / "shop", None)
    with (shop / "shop" / "settings.py").open("a") as settings:
        settings.write(
            "TENURE = {'QUEUE': {}, 'URL': 'mysql://db/shop',"
            " 'QUEUES': {'a': {'lease_ttl': -1}, 'b': {'max_attempt': 3}}}\n"
        )
    done = manage(shop, "check", check=False)
    assert done.returncode == 1
    said = done.stderr
    assert "(tenure.E001) TENURE['URL'] mysql://db/shop: unknown backend scheme 'mysql'" in said
    assert "TENURE['QUEUES']['a']: lease_ttl must be a number of seconds" in said, said
    assert "TENURE['QUEUES']['b']: unknown policy fields ['max_attempt']" in said, said
    assert "(tenure.W001) unknown key 'QUEUE' in settings.TENURE" in said, said
    refused = manage(shop, "tenure", "worker", check=False)  # a worker does not start
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: TENURE['URL'] mysql://db/shop"), refused.stderr


USERS = """
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()
from django.contrib.auth.models import User
from django.test import Client

cookies = []
for name, is_staff in (("clerk", False), ("boss", True)):
    client = Client()
    client.force_login(User.objects.create_user(name, password="x", is_staff=is_staff))
    cookies.append(client.cookies["sessionid"].value)
print(*cookies)
"""


def test_the_dashboard_in_the_projects_asgi_app__is_for_its_staff(shop: Path) -> None:
    (shop / "users.py").write_text(USERS)
    done = subprocess.run([sys.executable, "users.py"], cwd=shop, env=environment(),
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    clerk, boss = done.stdout.split()
    port = free_port()
    serve = [sys.executable, "-m", "uvicorn", "shop.asgi:application", "--port", str(port)]
    with running(serve, shop) as server:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        page = {"accept": "text/html"}
        anonymous = httpx.get(f"{base}/tenure/", headers=page)
        assert anonymous.status_code == 302
        assert anonymous.headers["location"] == "/accounts/login/?next=/tenure/"
        assert httpx.get(f"{base}/tenure/api/queues").status_code == 403
        assert httpx.get(f"{base}/tenure", headers=page).headers["location"] == "/tenure/"
        refused = httpx.get(f"{base}/tenure/", headers=page, cookies={"sessionid": clerk})
        assert refused.status_code == 403
        staff = {"sessionid": boss}
        overview = httpx.get(f"{base}/tenure/", headers=page, cookies=staff)
        assert overview.status_code == 200 and "content-security-policy" in overview.headers
        links = re.findall(r'(?:href|src)="(/[^"]*)"', overview.text)
        assert links and all(link.startswith("/tenure/") for link in links), links
        queues = httpx.get(f"{base}/tenure/api/queues", cookies=staff)
        assert queues.status_code == 200 and "storage" in queues.json(), queues.text
        # Django let the request in; tenure still refuses a cross-site write.
        cross = {"sec-fetch-site": "cross-site", "origin": "https://evil.example"}
        write = httpx.post(f"{base}/tenure/api/jobs", json={"task": "send_receipt"},
                           headers=cross, cookies=staff)  # fmt: skip
        assert write.status_code == 403 and "cross-site" in write.text
        assert httpx.get(f"{base}/admin/login/").status_code == 200  # Django's own, as before
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert "Application shutdown complete" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("database", "url"),
    [
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/shop db.sqlite3"},
         "sqlite:////srv/shop%20db.sqlite3?adopt=1"),
        ({"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "app@x",
          "PASSWORD": "p:w/d?", "HOST": "db", "PORT": 5433,
          "OPTIONS": {"sslmode": "require", "isolation_level": 1}},
         "postgresql://app%40x:p%3Aw%2Fd%3F@db:5433/shop?sslmode=require"),
        ({"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "HOST": "/run/pg"},
         "postgresql://localhost/shop?host=%2Frun%2Fpg"),
    ],
)  # fmt: skip
def test_the_url_of_a_django_database__names_it_for_tenure(database: dict, url: str) -> None:
    from tenure.backends.factory import from_url
    from tenure.contrib.django.conf import same_database, url_of_database

    assert url_of_database(database) == url
    from_url(url)  # tenure reads it
    assert same_database(url, database)


def test_a_database_tenure_cannot_share__asks_for_a_url() -> None:
    from tenure.contrib.django.conf import url_of_database

    with pytest.raises(tenure.InvalidInput, match=r"set TENURE = \{'URL'"):
        url_of_database({"ENGINE": "django.db.backends.mysql", "NAME": "shop"})


def test_a_postgres_database_of_the_test_server__is_shared_by_name(
    postgres_server: PostgresServer,
) -> None:
    from tenure.contrib.django.conf import same_database

    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "shop",
                "HOST": "127.0.0.1", "PORT": str(postgres_server.port)}  # fmt: skip
    assert same_database(postgres_server.url("shop"), database)
    assert not same_database(postgres_server.url("other"), database)
