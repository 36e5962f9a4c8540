"""Values at the door: JSON only, times and numbers within bounds, and every
stored value rendered, whatever it is."""

from __future__ import annotations

import datetime
import io
from typing import Any

import orjson
import pytest
from rich.console import Console

from tenure.cli import output
from tenure.config import MAX_SECONDS, QueuePolicy
from tenure.context import JobContext
from tenure.core.names import check_job_id, shown
from tenure.core.payload import check, encode
from tenure.core.states import State
from tenure.errors import InvalidInput, Retry
from tenure.job import Attempt, Job, JobSpec

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "value",
    [NAN, INF, -INF, [1, NAN], {"a": {"b": (INF,)}}, datetime.datetime(2026, 1, 1),
     datetime.time(1, 2), {"d": datetime.date(2026, 1, 1)}],
)  # fmt: skip
def test_a_value_json_cannot_carry__is_refused_not_changed(value: Any) -> None:
    with pytest.raises(InvalidInput, match="job result must be JSON"):
        encode(value, what="job result", limit=1 << 20)


def test_the_refusal_of_a_nan__says_where_it_is() -> None:
    with pytest.raises(InvalidInput, match=r"nan at \['rows'\]\[1\]\['v'\] is not a JSON number"):
        check({"rows": [{"v": 1.0}, {"v": NAN}]}, what="job arguments")


@pytest.mark.parametrize(
    "value",
    [None, {"a": None}, [None, 1.5, -0.0, 1e308], "null", {"t": (1, None)}, 2**63 - 1],
)
def test_json_values__encode_as_orjson_writes_them(value: Any) -> None:
    assert encode(value, what="x", limit=1 << 20) == orjson.dumps(value)


def test_a_handler_s_progress_that_is_not_json__is_refused_before_it_leaves() -> None:
    sent: list[Any] = []
    ctx = JobContext("id", "t", "default", 1, 1, {}, _progress=sent.append, _heartbeat=list)
    with pytest.raises(InvalidInput, match="progress must be JSON"):
        ctx.progress({"done": NAN})
    ctx.progress({"done": 0.5})
    assert sent == [{"done": 0.5}]


@pytest.mark.parametrize("in_", [1e12, MAX_SECONDS + 1, INF, NAN, -1, True, "5"])
def test_retry_in_out_of_ten_years__is_invalid_input(in_: Any) -> None:
    with pytest.raises(InvalidInput, match=r"Retry\(in_=...\)"):
        Retry(in_)


def test_retry_in_up_to_ten_years__is_kept() -> None:
    assert Retry(MAX_SECONDS).in_ == MAX_SECONDS
    assert Retry(0).in_ == 0


def test_a_stored_policy_out_of_bounds__is_read_within_them() -> None:
    """Stored before the bounds (or by hand): read, never refused, or no worker
    could read its queue's policy and nobody could change it."""
    stored = {"lease_ttl": 1e308, "heartbeat_interval": 1e307, "max_attempts": 2**40,
              "max_stalls": 0, "backoff_jitter": True, "timeout": -1.0, "unknown": 1}  # fmt: skip
    policy = QueuePolicy.from_json(orjson.dumps(stored))
    assert (policy.lease_ttl, policy.heartbeat_interval) == (3600.0, 1800.0)
    assert (policy.max_attempts, policy.max_stalls) == (1_000_000, 1)
    assert (policy.backoff_jitter, policy.timeout) == (QueuePolicy().backoff_jitter, None)
    tiny = QueuePolicy.from_json(b'{"lease_ttl": 1e-9, "heartbeat_interval": 1e-10}')
    assert (tiny.lease_ttl, tiny.heartbeat_interval) == (0.05, 0.01)


def test_a_stored_retention_out_of_bounds__is_read_within_them_and_null_is_forever() -> None:
    policy = QueuePolicy.from_json(b'{"keep_completed": -5, "keep_dead": null}')
    assert (policy.keep_completed, policy.keep_dead) == (0, None)
    odd = QueuePolicy.from_json(b'{"keep_completed": "a day", "keep_dead": 1e300}')
    assert (odd.keep_completed, odd.keep_dead) == (QueuePolicy().keep_completed, MAX_SECONDS)


def test_a_valid_stored_policy__is_read_as_stored() -> None:
    policy = QueuePolicy(lease_ttl=5, heartbeat_interval=1, max_attempts=7, timeout=2.5)
    assert QueuePolicy.from_json(orjson.dumps(policy.to_dict())) == policy


def test_a_policy_error__states_the_bounds() -> None:
    lease = r"lease_ttl must be a number of seconds within \[0.05, 3600\], got 1e-09"
    with pytest.raises(InvalidInput, match=lease):
        QueuePolicy(lease_ttl=1e-9)
    attempts = r"max_attempts must be an integer within \[1, 1000000\], got an integer of 401 bits"
    with pytest.raises(InvalidInput, match=attempts):
        QueuePolicy(max_attempts=2**400)


def test_an_int_too_long_to_write__is_shown_by_its_size() -> None:
    assert shown(10**5000) == "an integer of 16610 bits"
    assert len(shown("x" * 10_000)) < 70


@pytest.mark.parametrize("job_id", ["\udcff", "a\x00", "", 7, None, "x" * 101])
def test_a_malformed_job_id__is_invalid_input(job_id: Any) -> None:
    with pytest.raises(InvalidInput, match="invalid job id"):
        check_job_id(job_id)


# Times storage may hold from before they were bounded: no date can show them.
UNDATED = [1e12 * 31_556_952, 1e18, -1e18, INF, -INF, NAN]


@pytest.mark.parametrize("ts", UNDATED)
def test_a_time_no_date_can_show__renders_as_its_number(ts: float) -> None:
    assert output.when(ts) == f"{ts!r} (epoch s)"


def test_a_job_with_undated_times__renders_in_a_listing_and_alone() -> None:
    job = Job("j1", "t", "default", {}, State.SCHEDULED, 0, run_at=1e18, created_at=INF,
              finished_at=NAN, lease_expires_at=-1e18,
              history=(Attempt(1, 1, "w", 1e18, INF, None),))  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=200)
    console.print(output.jobs_table([job]))
    console.print(output.job_fields(job, QueuePolicy()))
    console.print(output.history_table(job))
    text = out.getvalue()
    assert text.count(" 1e+18 (epoch s)") == 3  # run at, twice; started
    assert "-1e+18 (epoch s)" in text and "inf (epoch s)" in text and "nan (epoch s)" in text


@pytest.mark.parametrize("args_list", [5, None, {"a": 1}, "abc"])
def test_enqueue_many_of_something_not_a_list_of_dicts__is_invalid_input(args_list: Any) -> None:
    with pytest.raises(InvalidInput, match="a list of argument dicts"):
        JobSpec.create_many("t", args_list)
