"""Job states, the transition table and unique-state masks."""

from __future__ import annotations

import itertools

import pytest

from awa.domain import IllegalTransition, JobState, check_transition, is_legal_transition
from awa.domain.states import (
    DEFAULT_UNIQUE_STATES,
    DEFERRED_STATES,
    LEGAL_TRANSITIONS,
    PENDING_STATES,
    TERMINAL_STATES,
    bitstring_to_mask,
    mask_contains,
    mask_to_bitstring,
    mask_to_states,
    states_to_mask,
)

S = JobState

SQL_ORDER = [
    ("scheduled", 0),
    ("available", 1),
    ("running", 2),
    ("completed", 3),
    ("retryable", 4),
    ("failed", 5),
    ("cancelled", 6),
    ("waiting_external", 7),
]


@pytest.mark.parametrize(("label", "value"), SQL_ORDER)
def test_state_int_values_and_labels_follow_the_sql_enum(label: str, value: int) -> None:
    state = JobState(value)
    assert int(state) == value
    assert state == value
    assert str(state) == label
    assert state.sql_name == label
    assert f"{state}" == label


def test_there_are_exactly_eight_states() -> None:
    assert [int(s) for s in JobState] == list(range(8))


def test_repr_names_the_member() -> None:
    assert repr(S.WaitingExternal) == "JobState.WaitingExternal"


@pytest.mark.parametrize(("label", "value"), SQL_ORDER)
def test_parse_accepts_label_member_name_int_and_state(label: str, value: int) -> None:
    state = JobState(value)
    assert JobState.parse(label) is state
    assert JobState.parse(f"  {label} ") is state
    assert JobState.parse(state.name) is state
    assert JobState.parse(value) is state
    assert JobState.parse(state) is state


@pytest.mark.parametrize("bad", ["", "done", "RUNNING", "waiting-external"])
def test_parse_refuses_unknown_labels(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown job state"):
        JobState.parse(bad)


def test_parse_refuses_out_of_range_ints() -> None:
    with pytest.raises(ValueError):
        JobState.parse(8)


def test_state_groups() -> None:
    assert {s for s in JobState if s.is_terminal} == {S.Completed, S.Failed, S.Cancelled}
    assert {S.Completed, S.Failed, S.Cancelled} == TERMINAL_STATES
    assert {S.Scheduled, S.Retryable} == DEFERRED_STATES
    assert {S.Scheduled, S.Available, S.Retryable, S.WaitingExternal} == PENDING_STATES
    assert {s for s in JobState if s.is_live_attempt} == {S.Running, S.WaitingExternal}


LEGAL = [
    (S.Scheduled, S.Available),
    (S.Retryable, S.Available),
    (S.Available, S.Running),
    (S.Running, S.Completed),
    (S.Running, S.Retryable),
    (S.Running, S.Scheduled),
    (S.Running, S.Failed),
    (S.Running, S.Cancelled),
    (S.Running, S.WaitingExternal),
    (S.WaitingExternal, S.Running),
    (S.WaitingExternal, S.Completed),
    (S.WaitingExternal, S.Retryable),
    (S.WaitingExternal, S.Failed),
    (S.WaitingExternal, S.Cancelled),
    (S.WaitingExternal, S.Available),
    (S.Running, S.Available),
    (S.Scheduled, S.Cancelled),
    (S.Available, S.Cancelled),
    (S.Retryable, S.Cancelled),
    (S.Failed, S.Available),
    (S.Cancelled, S.Available),
    (S.Completed, S.Available),
    (S.Available, S.Scheduled),
    (S.Scheduled, S.Failed),
    (S.Cancelled, S.Scheduled),
]


@pytest.mark.parametrize(("old", "new"), LEGAL)
def test_legal_transitions_are_accepted(old: JobState, new: JobState) -> None:
    assert is_legal_transition(old, new)
    check_transition(old, new)


def test_the_table_is_exactly_the_documented_set() -> None:
    assert set(LEGAL) == LEGAL_TRANSITIONS


ILLEGAL = [
    (S.Completed, S.Running),
    (S.Completed, S.Failed),
    (S.Failed, S.Completed),
    (S.Cancelled, S.Running),
    (S.Scheduled, S.Running),
    (S.Retryable, S.Running),
    (S.Available, S.Completed),
    (S.Available, S.Failed),
    (S.Scheduled, S.WaitingExternal),
    (S.Available, S.WaitingExternal),
    (S.WaitingExternal, S.Scheduled),
    (S.Failed, S.Retryable),
]


@pytest.mark.parametrize(("old", "new"), ILLEGAL)
def test_illegal_transitions_are_refused(old: JobState, new: JobState) -> None:
    assert not is_legal_transition(old, new)
    with pytest.raises(IllegalTransition) as info:
        check_transition(old, new)
    assert info.value.old == str(old)
    assert info.value.new == str(new)
    assert f"{old} -> {new}" in str(info.value)


def test_no_state_transitions_to_itself() -> None:
    for state in JobState:
        assert not is_legal_transition(state, state)


def test_terminal_states_only_leave_through_operator_retry() -> None:
    # ... or, for a job its parent's failure cancelled, back to waiting when the parent
    # is retried (ADR 0032).
    for old, new in itertools.product(TERMINAL_STATES, JobState):
        expected = new == S.Available or (old, new) == (S.Cancelled, S.Scheduled)
        assert is_legal_transition(old, new) == expected


def test_only_available_jobs_are_claimed() -> None:
    into_running = {old for old, new in LEGAL_TRANSITIONS if new == S.Running}
    assert into_running == {S.Available, S.WaitingExternal}


# ---------------------------------------------------------------- masks


def test_default_unique_states_mask() -> None:
    assert mask_to_states(DEFAULT_UNIQUE_STATES) == {
        S.Scheduled,
        S.Available,
        S.Running,
        S.Completed,
        S.Retryable,
    }
    assert mask_to_bitstring(DEFAULT_UNIQUE_STATES) == "11111000"


def test_mask_bit_i_is_state_i() -> None:
    for state in JobState:
        mask = states_to_mask({state})
        assert mask == 1 << int(state)
        assert mask_contains(mask, state)
        assert not any(mask_contains(mask, other) for other in JobState if other != state)


def test_mask_examples() -> None:
    assert states_to_mask(set()) == 0
    assert states_to_mask(set(JobState)) == 0xFF
    assert states_to_mask({S.Available, S.Failed}) == 0b0010_0010
    assert mask_to_states(0b1000_0001) == {S.Scheduled, S.WaitingExternal}


def test_bitstring_reads_left_to_right_in_state_order() -> None:
    assert mask_to_bitstring(0) == "00000000"
    assert mask_to_bitstring(1) == "10000000"
    assert mask_to_bitstring(1 << 7) == "00000001"
    assert bitstring_to_mask("01000100") == states_to_mask({S.Available, S.Failed})


@pytest.mark.parametrize("mask", [-1, 256, 1 << 20])
def test_masks_must_fit_in_eight_bits(mask: int) -> None:
    with pytest.raises(ValueError, match="8 bits"):
        mask_to_states(mask)


@pytest.mark.parametrize("bits", ["", "1111111", "111111111", "1111111x", "0000 000"])
def test_malformed_bitstrings_are_refused(bits: str) -> None:
    with pytest.raises(ValueError, match="bit string"):
        bitstring_to_mask(bits)
