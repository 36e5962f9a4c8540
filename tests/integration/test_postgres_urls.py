"""PostgreSQL URLs that reach a real server: through its socket directory
(a URL with no host but ``?host=``), and past a host that refuses."""

from __future__ import annotations

from tenure import App
from tests.servers import PostgresServer, free_port


def test_a_url_with_only_a_socket_directory__connects_through_it(
    postgres_server: PostgresServer,
) -> None:
    name = postgres_server.new_database().rsplit("/", 1)[1]
    server = postgres_server
    url = f"postgresql:///{name}?host={server.root}&port={server.port}&user=postgres"
    on_socket = (  # psql here comes over TCP: it does not count itself
        f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}' AND client_port = -1"
    )
    with App(url) as app:
        job = app.enqueue("t", {})
        assert app.get_job(job.id).id == job.id
        assert int(server.psql(on_socket)) >= 1


def test_a_url_naming_a_refusing_host_first__connects_to_the_next(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.new_database()
    first_refuses = url.replace("127.0.0.1:", f"127.0.0.1:{free_port()},127.0.0.1:", 1)
    with App(first_refuses) as app:
        job = app.enqueue("t", {})
        assert app.get_job(job.id).id == job.id
