from tenure.core.states import (
    CANCELLABLE,
    CLAIMABLE,
    TERMINAL,
    TRANSITIONS,
    DeadReason,
    Outcome,
    State,
    can_transition,
)


def test_every_state_has_a_row_in_the_transition_table():
    assert set(TRANSITIONS) == set(State)


def test_terminal_states_have_no_way_out_except_dead_which_can_be_retried():
    assert TRANSITIONS[State.COMPLETED] == frozenset()
    # a workflow's step cancelled as its upstream failed waits again on its retry
    assert TRANSITIONS[State.CANCELLED] == {State.WAITING}
    assert TRANSITIONS[State.DEAD] == {State.QUEUED}
    assert {State.COMPLETED, State.DEAD, State.CANCELLED} == TERMINAL


def test_only_claimable_states_lead_to_active():
    assert {s for s in State if can_transition(s, State.ACTIVE)} == CLAIMABLE


def test_only_unclaimed_jobs_are_cancelled_at_once():
    assert {State.WAITING, State.SCHEDULED, State.QUEUED} == CANCELLABLE


def test_a_waiting_step__is_released_or_cancelled_never_claimed():
    assert TRANSITIONS[State.WAITING] == {State.QUEUED, State.SCHEDULED, State.CANCELLED}
    assert State.WAITING not in CLAIMABLE


def test_an_active_job_is_cancelled_only_through_its_attempts_end():
    assert {s for s in State if can_transition(s, State.CANCELLED)} == CANCELLABLE | {State.ACTIVE}


def test_active_leads_to_every_settlement():
    assert TRANSITIONS[State.ACTIVE] == {
        State.COMPLETED,
        State.SCHEDULED,
        State.QUEUED,
        State.DEAD,
        State.CANCELLED,
    }


def test_a_state_prints_as_its_plain_name__alone_and_inside_a_dict() -> None:
    counts = {State.SCHEDULED: 1, State.QUEUED: 2}
    assert (str(State.QUEUED), repr(State.QUEUED)) == ("queued", "'queued'")
    assert str(counts) == "{'scheduled': 1, 'queued': 2}"
    assert f"{State.DEAD!r} {Outcome.CRASHED!r} {DeadReason.UNKNOWN_TASK!r}" == (
        "'dead' 'crashed' 'unknown_task'"
    )
    assert isinstance(State.QUEUED, State) and State("queued") is State.QUEUED
