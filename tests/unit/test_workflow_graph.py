"""A flow compiled to the graph storage keeps, and a flow as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from tenure import App, Failed, chain, group
from tenure.core.states import DeadReason
from tenure.core.workflows import (
    MAX_EDGES,
    Step,
    compile_flow,
    edge_ord,
    is_workflow_id,
    spawn_ord,
)
from tenure.errors import InvalidInput
from tenure.flows import decode_values, encode_values, flow_from_json, flow_to_json
from tenure.job import JobSpec


@pytest.fixture
def app(tmp_path: Any) -> App:
    return App(f"sqlite:///{tmp_path / 't.db'}")


def s(name: str) -> Step:
    return Step(JobSpec.create(name, {}))


def tasks(spec: Any) -> list[str]:
    return [st.spec.task for st in spec.steps]


def test_a_chain_of_a_group__waits_for_each_branchs_last_step() -> None:
    spec = compile_flow(chain(s("a"), group(chain(s("b"), s("c")), s("d")), s("e")))
    assert tasks(spec) == ["a", "b", "c", "d", "e"]
    assert [st.upstream for st in spec.steps] == [(), (0,), (1,), (0,), (2, 3)]
    assert spec.sinks == (4,) and not spec.many
    assert is_workflow_id(spec.id)


def test_a_flow_ending_with_a_group__has_a_list_for_result() -> None:
    spec = compile_flow(chain(s("a"), group(s("b"), s("c"))))
    assert spec.sinks == (1, 2) and spec.many


def test_one_step_object_used_twice__makes_two_jobs() -> None:
    one = s("a")
    spec = compile_flow(group(one, one))
    assert len({st.spec.id for st in spec.steps}) == 2


def test_a_step_with_a_key__is_refused() -> None:
    with pytest.raises(InvalidInput, match="take no key"):
        compile_flow(chain(Step(JobSpec.create("a", {}, key="k"))))


def test_empty_or_wrong_parts__are_refused(app: App) -> None:
    with pytest.raises(InvalidInput, match="at least one"):
        chain()
    with pytest.raises(InvalidInput, match=r"task.step"):
        group(print)  # type: ignore[arg-type]

    @app.task
    def t(x: int) -> int:
        return x

    with pytest.raises(InvalidInput, match="do not fit"):
        t.step(y=1)  # type: ignore[call-arg]


def test_a_group_after_a_group_too_big__is_refused() -> None:
    n = int(MAX_EDGES**0.5) + 2
    with pytest.raises(InvalidInput, match="edges"):
        compile_flow(chain(group(*(s("a") for _ in range(n))), group(*(s("b") for _ in range(n)))))


def test_edge_keys__sort_spawns_right_after_their_spawner() -> None:
    keys = [edge_ord(3), spawn_ord(edge_ord(3), 1, 0), spawn_ord(edge_ord(3), 1, 1),
            spawn_ord(spawn_ord(edge_ord(3), 1, 1), 1, 0), spawn_ord(edge_ord(3), 2, 0),
            edge_ord(4)]  # fmt: skip
    assert sorted(keys) == keys


def test_a_flow_as_json__comes_back_the_same(app: App) -> None:
    @app.task(queue="q", timeout=5)
    def t(x: int) -> int:
        return x

    flow = chain(t.step(1), group(t.with_options(may_fail=True).step(2),
                                  t.with_options(concurrency_key="tenant-1").step(3)))  # fmt: skip
    again = flow_from_json(flow_to_json(flow))
    assert flow_to_json(again) == flow_to_json(flow)
    assert again.parts[1].parts[0].may_fail  # type: ignore[union-attr]
    # A step spawned in an executor process crosses its pipe so: its key with it.
    assert again.parts[1].parts[1].spec.concurrency_key == "tenant-1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "JSON object"),
        ({"chain": {}}, "takes a list"),
        ({"task": "t", "bogus": 1}, "a step takes"),
        ({"args": {}}, "'task' required"),
        ({"chain": [{"task": "bad name"}]}, r"flow.chain\[0\]"),
        ({"task": "t", "may_fail": "yes"}, "may_fail"),
        ({"group": []}, "at least one"),
    ],
)
def test_bad_json_flows__say_where(value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        flow_from_json(value)


def test_values_through_a_pipe__keep_failed_ones() -> None:
    values = [1, {"a": [1]}, Failed("j", "t", DeadReason.ERROR, "boom"), None]
    assert decode_values(encode_values(values)) == values


def test_flows_nested_too_deep__are_refused_at_once() -> None:
    from tenure.core.workflows import MAX_DEPTH

    flow: Any = s("a")
    for _ in range(MAX_DEPTH):
        flow = chain(flow)
    with pytest.raises(InvalidInput, match="nest at most"):
        group(flow)
    deep: Any = {"task": "a"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"chain": [deep]}
    with pytest.raises(InvalidInput, match="nest at most"):
        flow_from_json(deep)
