"""The operator's transition report: every blocker of the next step, not just the first."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awa.domain.transition import (
    Gate,
    RuntimeView,
    StorageCapability,
    TransitionRefused,
    TransitionState,
    TransitionStatus,
    abort,
    check_enter_mixed,
    check_finalize,
    enter_mixed,
    enter_mixed_refusals,
    finalize,
    prepare,
    status_report,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
LIVE_QS = RuntimeView(StorageCapability.QUEUE_STORAGE, live=True)
LIVE_CANONICAL = RuntimeView(StorageCapability.CANONICAL, live=True)
DEAD_QS = RuntimeView(StorageCapability.QUEUE_STORAGE, live=False)


def test_a_fresh_cluster_lists_every_blocker_of_both_steps() -> None:
    report = status_report(
        TransitionStatus(), canonical_backlog=0, schema_installed=False, runtimes=[]
    )
    assert report["state"] == "canonical"
    assert report["can_enter_mixed_transition"] is False
    assert report["enter_mixed_transition_blockers"] == [
        "enter-mixed-transition needs state prepared, the cluster is canonical",
        "the prepared engine is not queue_storage",
        "schema awa has no queue-storage tables",
        "no live runtime can execute queue storage",
    ]
    assert report["can_finalize"] is False
    assert report["finalize_blockers"] == [
        "finalize needs state mixed_transition, the cluster is canonical"
    ]
    assert report["prepared_queue_storage_schema"] is None
    assert report["prepared_schema_ready"] is False
    assert report["live_runtime_capability_counts"] == {}


def test_prepared_with_schema_and_a_capable_runtime_can_enter() -> None:
    status = TransitionStatus(
        prepared_engine="queue_storage",
        state=TransitionState.PREPARED,
        details={"schema": "qs"},
        entered_at=NOW,
    )
    report = status_report(
        status,
        canonical_backlog=3,
        schema_installed=True,
        runtimes=[LIVE_QS, LIVE_QS, DEAD_QS],
    )
    assert report["can_enter_mixed_transition"] is True
    assert report["enter_mixed_transition_blockers"] == []
    assert report["prepared_queue_storage_schema"] == "qs"
    assert report["prepared_schema_ready"] is True
    assert report["live_runtime_capability_counts"] == {"queue_storage": 2}
    assert report["canonical_live_backlog"] == 3
    assert report["finalize_blockers"] == [
        "finalize needs state mixed_transition, the cluster is prepared",
        "3 canonical job(s) are not finished yet",
    ]


def test_a_live_canonical_only_runtime_blocks_entering() -> None:
    status = TransitionStatus(prepared_engine="queue_storage", state=TransitionState.PREPARED)
    refused = enter_mixed_refusals(
        status, schema_installed=True, runtimes=[LIVE_QS, LIVE_CANONICAL]
    )
    assert [r.gate for r in refused] == [Gate.NO_LIVE_CANONICAL_ONLY_RUNTIME]


def test_mixed_with_drained_backlog_can_finalize() -> None:
    status = TransitionStatus(
        active_engine="queue_storage",
        prepared_engine="queue_storage",
        state=TransitionState.MIXED_TRANSITION,
    )
    report = status_report(status, canonical_backlog=0, schema_installed=True, runtimes=[])
    assert report["can_finalize"] is True
    assert report["finalize_blockers"] == []
    check_finalize(status, canonical_backlog=0)


def test_the_checks_raise_the_first_blocker() -> None:
    with pytest.raises(TransitionRefused) as refused:
        check_enter_mixed(TransitionStatus(), schema_installed=False, runtimes=[])
    assert refused.value.gate is Gate.STATE_IS_PREPARED
    with pytest.raises(TransitionRefused) as refused:
        check_finalize(TransitionStatus(), canonical_backlog=5)
    assert refused.value.gate is Gate.STATE_IS_MIXED_TRANSITION


def test_abort_on_a_canonical_cluster_is_a_no_op() -> None:
    canonical = TransitionStatus()
    assert canonical.state is TransitionState.CANONICAL
    assert abort(canonical, queue_storage_rows=True, now=NOW) == canonical


def test_abort_after_activation_is_refused() -> None:
    prepared = prepare(TransitionStatus(), "queue_storage", {}, NOW)
    mixed = enter_mixed(prepared, schema_installed=True, runtimes=[LIVE_QS], now=NOW)
    active = finalize(mixed, canonical_backlog=0, now=NOW)
    with pytest.raises(TransitionRefused) as refused:
        abort(active, queue_storage_rows=False, now=NOW)
    assert refused.value.gate is Gate.TRANSITION_IN_PROGRESS


def test_a_quiesced_flip_needs_no_live_runtime_at_all() -> None:
    prepared = prepare(TransitionStatus(), "queue_storage", {}, NOW)
    # Nothing live: the usual flip is refused, the quiesced one goes through.
    with pytest.raises(TransitionRefused) as refused:
        enter_mixed(prepared, schema_installed=True, runtimes=[DEAD_QS], now=NOW)
    assert refused.value.gate is Gate.LIVE_QUEUE_STORAGE_RUNTIME
    mixed = enter_mixed(prepared, schema_installed=True, runtimes=[DEAD_QS], now=NOW, quiesced=True)
    assert mixed.state is TransitionState.MIXED_TRANSITION
    for live in (LIVE_QS, LIVE_CANONICAL):
        with pytest.raises(TransitionRefused) as refused:
            enter_mixed(prepared, schema_installed=True, runtimes=[live], now=NOW, quiesced=True)
        assert refused.value.gate is Gate.NO_LIVE_RUNTIME


def test_a_status_turns_back_into_the_row_it_was_read_from() -> None:
    from datetime import UTC, datetime

    from awa.domain.transition import TransitionState, TransitionStatus

    status = TransitionStatus(
        current_engine="canonical",
        active_engine="queue_storage",
        prepared_engine="queue_storage",
        state=TransitionState.MIXED_TRANSITION,
        transition_epoch=3,
        details={"schema": "side"},
        entered_at=datetime(2030, 1, 1, tzinfo=UTC),
    )
    row = status.as_row()
    assert row["state"] == TransitionState.MIXED_TRANSITION.value
    assert TransitionStatus.from_row(row) == status
