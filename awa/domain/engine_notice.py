"""What a worker says at start, and ``awa health`` shows, about the storage engine it runs
on: the engine, and on canonical storage why and the commands that move it (ADR 0020)."""

from __future__ import annotations

import attrs

from awa.domain.transition import TransitionRole, TransitionState, TransitionStatus

#: The staged transition's commands, for a database that is on canonical storage.
MOVE_COMMANDS = (
    "`awa storage prepare --engine queue_storage`, then (with workers of this version "
    "running) `awa storage enter-mixed-transition` and, once the canonical backlog is "
    "empty, `awa storage finalize`; see docs/storage.md"
)


@attrs.frozen
class EngineNotice:
    """One line about the engine; ``canonical`` when jobs still run on canonical storage,
    which is deprecated and worth a warning."""

    text: str
    canonical: bool


def engine_notice(status: TransitionStatus, role: TransitionRole | None = None) -> EngineNotice:
    """The line for a runtime with ``role`` (``None``: no runtime, as ``awa health``) on a
    database in ``status``."""
    schema = status.schema
    if role is TransitionRole.CANONICAL_DRAIN:
        return EngineNotice(
            "storage engine: canonical only: this runtime was started with "
            "storage_transition_role='canonical_drain' and claims no queue-storage jobs",
            canonical=True,
        )
    if status.state is TransitionState.ACTIVE:
        return EngineNotice(f"storage engine: queue storage (schema {schema})", canonical=False)
    if status.state is TransitionState.MIXED_TRANSITION:
        return EngineNotice(
            f"storage engine: moving from canonical to queue storage (schema {schema}, state "
            "mixed_transition): new jobs go to queue storage while the canonical backlog "
            "drains; run `awa storage finalize` once it is empty",
            canonical=True,
        )
    if status.state is TransitionState.PREPARED:
        return EngineNotice(
            f"storage engine: canonical, with queue storage (schema {schema}) prepared: run "
            "`awa storage enter-mixed-transition` with workers of this version running, then "
            "`awa storage finalize` once the canonical backlog is empty",
            canonical=True,
        )
    return EngineNotice(
        "storage engine: canonical (deprecated): this database holds canonical jobs or DLQ "
        "entries from before it had queue storage (a database created by an earlier "
        "release or adopted, or one that went back with `awa storage abort`), so it moves "
        f"only by the staged transition, which runs while workers do: {MOVE_COMMANDS}",
        canonical=True,
    )
