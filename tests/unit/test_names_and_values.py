import pytest

from tenure.config import QueuePolicy, WorkerConfig
from tenure.core.clock import FakeClock
from tenure.core.ids import new_job_id
from tenure.core.names import check_key, check_name
from tenure.core.payload import decode, encode, encode_args
from tenure.errors import InvalidInput
from tenure.job import JobSpec


def test_a_fake_clock_never_goes_back():
    with pytest.raises(ValueError):
        FakeClock().advance(-1)


@pytest.mark.parametrize(
    "name", ["default", "a", "emails.high", "q:1", "x-y_z", "a" * 100, "...", ".a", "a.."]
)
def test_valid_names(name):
    assert check_name("queue", name) == name


@pytest.mark.parametrize("name", ["", "a b", "é", "a/b", "a" * 101, None, 3, "x;drop", ".", ".."])
def test_invalid_names__are_refused_with_the_rule(name):
    with pytest.raises(InvalidInput, match="1 to 100 characters"):
        check_name("queue", name)


def test_keys_are_bounded_strings():
    assert check_key(None) is None
    assert check_key("order-1") == "order-1"
    for bad in ("", "k" * 201, 5):
        with pytest.raises(InvalidInput):
            check_key(bad)


def test_payloads_are_json_only_and_bounded():
    assert decode(encode({"a": [1, 2]}, what="x", limit=100)) == {"a": [1, 2]}
    with pytest.raises(InvalidInput, match="must be JSON"):
        encode({1, 2}, what="x", limit=100)
    with pytest.raises(InvalidInput, match="more than the limit"):
        encode("x" * 200, what="x", limit=100)
    with pytest.raises(InvalidInput, match="JSON object"):
        encode_args([1, 2], limit=100)


def test_job_ids_are_unique_and_time_ordered():
    ids = [new_job_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) == 36 for i in ids)
    assert ids[0][:13] <= ids[-1][:13]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay": -1},
        {"delay": float("nan")},
        {"priority": 1.5},
        {"priority": True},
        {"max_attempts": 0},
        {"timeout": 0},
        {"run_at": float("inf")},
        {"delay": 5, "run_at": 2e9},
    ],
)
def test_job_specs_refuse_bad_options(kwargs):
    with pytest.raises(InvalidInput):
        JobSpec.create("task", {}, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease_ttl": 0},
        {"lease_ttl": 4, "heartbeat_interval": 3},
        {"max_attempts": 0},
        {"max_stalls": 1.5},
        {"delivery": "exactly-once"},
        {"backoff_jitter": 2},
        {"timeout": -1},
    ],
)
def test_policies_refuse_bad_values(kwargs):
    with pytest.raises(InvalidInput):
        QueuePolicy(**kwargs)


def test_policy_round_trips_and_names_unknown_fields():
    p = QueuePolicy(lease_ttl=5, heartbeat_interval=1)
    assert QueuePolicy.from_dict(p.to_dict()) == p
    with pytest.raises(InvalidInput, match="unknown policy field"):
        QueuePolicy.from_dict({"lease": 3})


def test_worker_config_validates_queues_and_counts():
    with pytest.raises(InvalidInput):
        WorkerConfig(queues=())
    with pytest.raises(InvalidInput):
        WorkerConfig(queues=("bad name",))
    with pytest.raises(InvalidInput):
        WorkerConfig(concurrency=0)
