"""The test servers themselves: real, on random ports, restartable."""

import socket


def test_the_postgres_server_gives_each_test_a_clean_database(postgres_server):
    a, b = postgres_server.new_database(), postgres_server.new_database()
    assert a != b
    name = a.rsplit("/", 1)[1]
    assert postgres_server.psql("SELECT current_database()", name) == name


def test_the_postgres_server_restarts(postgres_server):
    before = postgres_server.pid
    postgres_server.restart()
    assert postgres_server.pid != before
    assert postgres_server.psql("SELECT 1") == "1"


def test_the_redis_server_answers_and_restarts(redis_server):
    redis_server.flush()
    redis_server.restart()
    with socket.create_connection(("127.0.0.1", redis_server.port), 5) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(64) == b"+PONG\r\n"
