"""The batch operation's state machine: which moves a step may make, final states final."""

from __future__ import annotations

import pytest

from awa.domain.batch_ops import (
    ACTIVE_STATES,
    FINAL_STATES,
    BatchOpState,
    after_scan,
    cancel_requested,
    may_move,
    step_states,
)


@pytest.mark.parametrize("final", sorted(FINAL_STATES))
def test_a_final_state_is_absorbing(final: BatchOpState) -> None:
    assert not any(may_move(final, target) for target in BatchOpState)


@pytest.mark.parametrize("state", sorted(ACTIVE_STATES))
def test_an_unfinished_operation_may_stay_or_finish_in_any_final_state(
    state: BatchOpState,
) -> None:
    assert may_move(state, state)
    assert all(may_move(state, final) for final in FINAL_STATES)


def test_the_documented_moves_and_no_others() -> None:
    allowed = {
        (current, target)
        for current in BatchOpState
        for target in BatchOpState
        if may_move(current, target) and current != target and not target.is_final
    }
    assert allowed == {
        (BatchOpState.PENDING, BatchOpState.SCANNING),
        (BatchOpState.PENDING, BatchOpState.CANCELLING),
        (BatchOpState.SCANNING, BatchOpState.RUNNING),
        (BatchOpState.SCANNING, BatchOpState.CANCELLING),
        (BatchOpState.RUNNING, BatchOpState.CANCELLING),
    }
    for state in BatchOpState:
        target = cancel_requested(state)
        assert target is None or may_move(state, target)


def test_the_guards_engines_put_on_each_step() -> None:
    # add items / record results: any unfinished operation
    assert step_states(lambda state: state) == ACTIVE_STATES
    # end of a scan: not before a runner claimed it, not once finished
    assert step_states(after_scan) == {
        BatchOpState.SCANNING,
        BatchOpState.RUNNING,
        BatchOpState.CANCELLING,
    }
    # finish: from any unfinished state, into any final one
    for final in FINAL_STATES:

        def finish(_: BatchOpState, final: BatchOpState = final) -> BatchOpState:
            return final

        assert step_states(finish) == ACTIVE_STATES
