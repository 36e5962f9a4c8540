"""The PostgreSQL backend's statements: composed by name, rendered once per backend."""

import re

import pytest

from tenure.backends.postgres.statements import TEMPLATES, Statements, compose

IDS = {"schema": "tenure", "channel": "tenure.tenure"}


def test_parts_are_written_in_by_name__and_only_unnamed_blocks_are_statements():
    blocks = {
        "get": "SELECT {cols} FROM {schema}.t WHERE {cond}",
        "cond": "state = 'queued' LIMIT {limit}",
        "cycle": "WITH {gate} SELECT 1",
        "open": "g AS (SELECT 1)",
        "closed": "g AS (SELECT 0)",
    }
    composed = {"claim": ("cycle", {"gate": "open"}), "claim_none": ("cycle", {"gate": "closed"})}
    assert compose(blocks, {"cols": "id, fence"}, composed) == {
        "get": "SELECT id, fence FROM {schema}.t WHERE state = 'queued' LIMIT {limit}",
        "claim": "WITH g AS (SELECT 1) SELECT 1",
        "claim_none": "WITH g AS (SELECT 0) SELECT 1",
    }


@pytest.mark.parametrize(
    ("blocks", "composed", "error"),
    [
        ({"get": "SELECT {colums} FROM t"}, {}, "'get' names a part 'colums', which is none"),
        ({"a": "{b}", "b": "x {a}"}, {"c": ("a", {})}, "c -> a -> b -> a names itself"),
        ({"cycle": "{gate}"}, {"c": ("cycle", {"gate": "gaet"})}, "names a part 'gaet'"),
        ({"cols": "id"}, {}, "made by the code, not blocks"),
    ],
)
def test_a_part_that_is_none_or_names_itself__is_a_clear_error(blocks, composed, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        compose(blocks, {"cols": "id"}, composed)


def test_the_statements_of_queries_sql__are_composed_at_import():
    """Left for each backend: its identifiers, and a limit where one is written in."""
    left = {m for text in TEMPLATES.values() for m in re.findall(r"\{([a-z_]+)\}", text)}
    assert left == {"schema", "channel", "limit"}
    assert not any("--" in text for text in TEMPLATES.values())  # comments stripped
    assert {"complete_and_claim", "complete_and_claim_limited", "get_job"} <= TEMPLATES.keys()
    assert not {"cycle", "gate", "record_events", "end_attempt"} & TEMPLATES.keys()


@pytest.mark.parametrize(
    ("schema", "quoted"),
    [("tenure", '"tenure"'), ("Odd-Name.1:x", '"Odd-Name.1:x"'), ('a"b', '"a""b"')],
)
def test_identifiers_are_quoted_once__whatever_their_characters(schema, quoted):
    q = Statements({**IDS, "schema": schema, "channel": "tenure." + schema})
    assert q["get_job"].endswith(f" FROM {quoted}.jobs WHERE id = %(id)s".encode())
    assert q["listen"] == b'LISTEN "tenure.' + quoted[1:].encode()
    assert q.render("ALTER TABLE {schema}.jobs ADD x int -- {kept}") == (
        f"ALTER TABLE {quoted}.jobs ADD x int -- {{kept}}".encode()
    )
    rendered = [q.limited(n, 1) if n in q.with_limit else q[n] for n in q]
    assert not any(re.search(rb"\{(schema|channel)\}", t) for t in rendered)


def test_a_limit_is_written_in_per_call__as_an_integer_and_kept():
    q = Statements(IDS)
    four = q.limited("complete_and_claim", 4)
    assert b"LIMIT 4 FOR UPDATE SKIP LOCKED" in four and b"{limit}" not in four
    assert q.limited("complete_and_claim", 4) is four  # psycopg's cache finds it at once
    assert b"LIMIT 7\n" in q.limited("prune", 7)
    with pytest.raises(TypeError):
        q.limited("prune", "1; DROP TABLE jobs")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.limited("prune", 1.5)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="takes a limit"):
        q["complete_and_claim"]
    with pytest.raises(KeyError, match="no statement 'get_jobs'"):
        q["get_jobs"]
