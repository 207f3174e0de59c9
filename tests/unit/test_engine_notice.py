"""The engine line a worker logs at start and ``awa health`` prints (ADR 0020)."""

from __future__ import annotations

import pytest

from awa.domain.engine_notice import engine_notice
from awa.domain.transition import TransitionRole, TransitionState, TransitionStatus


def _status(state: TransitionState, schema: str | None = None) -> TransitionStatus:
    details = {} if schema is None else {"schema": schema}
    return TransitionStatus(state=state, details=details)


def test_queue_storage_names_its_schema_and_is_no_warning() -> None:
    notice = engine_notice(_status(TransitionState.ACTIVE, "x"), TransitionRole.AUTO)
    assert notice.text == "storage engine: queue storage (schema x)"
    assert not notice.canonical


def test_canonical_says_why_and_every_command_that_moves_it() -> None:
    notice = engine_notice(_status(TransitionState.CANONICAL))
    assert notice.canonical
    assert "earlier release" in notice.text
    for command in ("prepare --engine queue_storage", "enter-mixed-transition", "finalize"):
        assert f"awa storage {command}" in notice.text


@pytest.mark.parametrize(
    ("state", "next_command"),
    [
        (TransitionState.PREPARED, "awa storage enter-mixed-transition"),
        (TransitionState.MIXED_TRANSITION, "awa storage finalize"),
    ],
)
def test_mid_transition_names_the_next_step(state: TransitionState, next_command: str) -> None:
    notice = engine_notice(_status(state, "awa"))
    assert notice.canonical and next_command in notice.text
    assert "(schema awa" in notice.text


def test_a_canonical_drain_runtime_says_so_whatever_the_state() -> None:
    notice = engine_notice(_status(TransitionState.ACTIVE), TransitionRole.CANONICAL_DRAIN)
    assert notice.canonical and "canonical_drain" in notice.text
