"""Checks and helpers every backend shares: validation of verbs' arguments
that storage does not need to see, and the errors the backends all raise alike."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tenure.config import check_seconds
from tenure.core.events import RetriedBy
from tenure.core.names import check_job_id, check_key, check_name, is_text, shown
from tenure.core.states import Outcome, State, parse_state
from tenure.core.workflows import (
    MAX_EDGES,
    MAX_STEPS,
    WORKFLOW_ID_PREFIX,
    WorkflowSpec,
    is_workflow_id,
)
from tenure.errors import InvalidInput, InvalidTransition
from tenure.job import Job, check_specs

LIST_LIMIT = 10_000
CURSOR_MAX_LENGTH = 200
SEQ_MAX = 2**63 - 1  # insertion numbers are 64-bit on every backend


def check_listing(queue: str | None, state: object, limit: int) -> State | None:
    """Validate a listing's filters (shared by every backend's ``list``)."""
    if queue is not None:
        check_name("queue", queue)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= LIST_LIMIT:
        raise InvalidInput(f"limit must be an integer within [1, {LIST_LIMIT}], got {shown(limit)}")
    return None if state is None else parse_state(state)


def bad_cursor(after: object) -> InvalidInput:
    return InvalidInput(f"bad cursor {shown(after)}: pass back a page's next_cursor")


def check_cursor(after: object) -> str | None:
    """A listing's ``after`` as a string each backend may parse (or None)."""
    if after is None:
        return None
    if not isinstance(after, str) or len(after) > CURSOR_MAX_LENGTH or not is_text(after):
        raise bad_cursor(after)
    return after


def check_retried_by(by: object) -> RetriedBy:
    """``retry_dead``'s ``by``, as a RetriedBy; InvalidInput for another value."""
    if isinstance(by, str) and by in RetriedBy.__members__.values():
        return RetriedBy(by)
    known = ", ".join(r.value for r in RetriedBy)
    raise InvalidInput(f"by must be one of {known}, got {shown(by)}")


def not_cancellable(job: Job) -> InvalidTransition:
    """The error of a cancel of a finished job (every backend's)."""
    return InvalidTransition(
        f"job {job.id} is {job.state}: only scheduled, queued or active jobs can be cancelled"
    )


def check_ago(ago: object) -> float:
    """``events_now``'s ``ago``: seconds within [0, ten years], as a float."""
    check_seconds("ago", ago)
    return float(ago)  # type: ignore[arg-type]  # checked: a real number


def cursor_seq(text: str) -> int:
    """The insertion number a cursor of the SQL backends (its digits) names."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= SEQ_MAX):
        raise bad_cursor(text)
    return int(text)


MATCH_LIMIT = 100  # the most ids one ``match_ids`` returns


def check_match(prefix: object, limit: object) -> tuple[str, int]:
    """Validate ``match_ids``'s prefix (a possible job id) and limit."""
    check_job_id(prefix)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MATCH_LIMIT:
        raise InvalidInput(
            f"limit must be an integer within [1, {MATCH_LIMIT}], got {shown(limit)}"
        )
    return prefix, limit  # type: ignore[return-value]  # checked: a str


def prefix_range(prefix: str) -> tuple[str, str] | None:
    """Bounds ``low <= id < high`` of an index range that holds every id
    beginning with ``prefix`` (the caller filters the range by the prefix
    itself); None when no id tenure makes can begin with it (it does not begin
    with an ASCII letter or digit, as every ``new_job_id`` does). Trailing
    punctuation is left out of the bounds: a database collation (en_US) may
    ignore it, and '0190abcd.' would then sort before '0190abcd-0123'; ASCII
    letters and digits sort alike in every collation."""
    stem = prefix
    while stem and not (stem[-1].isascii() and stem[-1].isalnum()):
        stem = stem[:-1]
    if not stem:
        return None
    return stem, stem[:-1] + chr(ord(stem[-1]) + 1)


PRUNE_LIMIT = 10_000  # the most finished jobs one prune deletes: a bounded transaction


def check_prune_limit(limit: object) -> int:
    """A prune's ``limit``: an integer within [1, PRUNE_LIMIT]."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= PRUNE_LIMIT:
        raise InvalidInput(
            f"limit must be an integer within [1, {PRUNE_LIMIT}], got {shown(limit)}"
        )
    return limit


def check_tick(schedule: object, at: object) -> float:
    """Validate a tick's schedule name and time; the time as a float."""
    check_name("schedule", schedule)
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at <= TICK_MAX:
        raise InvalidInput(f"a tick is a time in seconds since the epoch, got {shown(at)}")
    return float(at)


def check_schedules(schedules: object) -> list[tuple[str, str]]:
    """Validate ``(queue, schedule)`` pairs (``last_ticks``'s)."""
    if isinstance(schedules, str | bytes) or not isinstance(schedules, Collection):
        raise InvalidInput(f"schedules must be (queue, name) pairs, got {shown(schedules)}")
    pairs = []
    for pair in schedules:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidInput(f"a schedule is a (queue, name) pair, got {shown(pair)}")
        pairs.append((check_name("queue", pair[0]), check_name("schedule", pair[1])))
    return pairs


TICK_MAX = 253_402_300_799.0  # 9999-12-31T23:59:59Z: a tick must render as a date


def last_proof(outcome: Outcome, renewed: float | None, heartbeat: float | None) -> float | None:
    """When a recovered attempt was last proven alive (``Rescued.proven_at``),
    from its lease's last renewal and its worker's last heartbeat (None when
    storage no longer knew the worker): the later of the two for a gone worker
    (``crashed``), the renewal for an expired lease."""
    if outcome is not Outcome.CRASHED or heartbeat is None:
        return renewed
    return heartbeat if renewed is None else max(renewed, heartbeat)


def queue_busy(queue: str, active: int) -> InvalidTransition:
    """Why a queue with active jobs cannot be deleted."""
    return InvalidTransition(
        f"queue {queue!r} has {active} active job(s): pause it and let them finish "
        "(or stop its workers) before deleting it"
    )


def claim_limit(queues: Sequence[str], limit: int) -> int:
    """Validate a claim's queues; how many jobs to claim (0 without a queue)."""
    for q in queues:
        check_name("queue", q)
    return limit if queues and limit > 0 else 0


def check_graph(spec: object, max_payload: int, *, spawn: bool = False) -> WorkflowSpec:
    """``spec``, unless it is no graph storage can keep as it is (InvalidInput):
    its id a job id, each step's spec valid (against ``max_payload``, if
    given) and without key, ids unique (and not the workflow's), each upstream
    index that of an earlier step, at most once, and each sink that of a step,
    at most once. A spawn's id and key are ignored. Every backend checks it
    before it stores anything."""
    if not isinstance(spec, WorkflowSpec):
        raise InvalidInput(f"a workflow's graph is a WorkflowSpec, got {shown(spec)}")
    if not spawn:
        check_job_id(spec.id)
        if not is_workflow_id(spec.id):
            raise InvalidInput(
                f"invalid workflow id {shown(spec.id)}: it starts with {WORKFLOW_ID_PREFIX!r}"
            )
        check_key(spec.key)
    steps = spec.steps
    if not 0 < len(steps) <= MAX_STEPS:
        raise InvalidInput(f"a workflow has 1 to {MAX_STEPS} steps, got {len(steps)}")
    check_specs([s.spec for s in steps], max_payload)
    ids = {s.spec.id for s in steps}
    if len(ids) < len(steps) or spec.id in ids:
        raise InvalidInput(
            f"workflow {spec.id}: two of its steps, or it and a step, have the same job id"
        )
    for i, s in enumerate(steps):
        if s.spec.key is not None:
            raise InvalidInput(f"step {i} of workflow {spec.id} has a key: steps take none")
        _check_indexes(f"step {i}'s upstream", s.upstream, i)
    if not spec.sinks:
        raise InvalidInput(f"workflow {spec.id} has no sinks: its result would be no step's")
    _check_indexes("the sinks", spec.sinks, len(steps))
    if any(is_workflow_id(i) for i in ids):
        raise InvalidInput(f"a step's job id may not start with {WORKFLOW_ID_PREFIX!r}")
    if spec.edges() > MAX_EDGES:
        raise InvalidInput(f"a workflow has at most {MAX_EDGES} edges, got {spec.edges()}")
    return spec


def _check_indexes(what: str, indexes: object, below: int) -> None:
    if not isinstance(indexes, tuple) or not all(
        type(i) is int and 0 <= i < below for i in indexes
    ):
        raise InvalidInput(
            f"{what} must be indexes of earlier steps (below {below}): {shown(indexes)}"
        )
    if len(set(indexes)) < len(indexes):
        raise InvalidInput(f"{what} must name earlier steps, each once: {shown(indexes)}")
