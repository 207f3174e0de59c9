"""The staged storage transition as a pure state machine (ADR 0007).

``canonical -> prepared -> mixed_transition -> active``, with ``abort`` back to
``canonical`` from ``prepared`` (always) and from ``mixed_transition`` (only while queue
storage holds no job). Each step is guarded by gates; a refused step raises
:class:`TransitionRefused` naming the first gate that failed. The Postgres functions of
migration 0200 implement the same gates with the same names; the property tests check the
two agree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs

from awa.domain.errors import AwaError
from awa.domain.validation import schema_name_problem

CANONICAL_ENGINE = "canonical"
QUEUE_STORAGE_ENGINE = "queue_storage"
DEFAULT_SCHEMA = "awa"


class TransitionState(enum.Enum):
    CANONICAL = "canonical"
    PREPARED = "prepared"
    MIXED_TRANSITION = "mixed_transition"
    ACTIVE = "active"


class TransitionRole(enum.Enum):
    """What a runtime does during a transition (``start(storage_transition_role=...)``)."""

    AUTO = "auto"
    CANONICAL_DRAIN = "canonical_drain"
    QUEUE_STORAGE_TARGET = "queue_storage_target"


class StorageCapability(enum.Enum):
    """What a runtime can execute, as published in ``awa.runtime_instances``."""

    CANONICAL = "canonical"
    CANONICAL_DRAIN_ONLY = "canonical_drain_only"
    QUEUE_STORAGE = "queue_storage"


class Gate(enum.Enum):
    """Every condition a step can be refused on; the value is the name in error messages."""

    PREPARE_FROM_CANONICAL = "prepare_from_canonical"
    ENGINE_IS_QUEUE_STORAGE = "engine_is_queue_storage"
    ENGINE_DIFFERS_FROM_CURRENT = "engine_differs_from_current"
    DETAILS_IS_OBJECT = "details_is_object"
    SCHEMA_IS_IDENTIFIER = "schema_is_identifier"
    STATE_IS_PREPARED = "state_is_prepared"
    QUEUE_STORAGE_SCHEMA_INSTALLED = "queue_storage_schema_installed"
    NO_LIVE_CANONICAL_ONLY_RUNTIME = "no_live_canonical_only_runtime"
    LIVE_QUEUE_STORAGE_RUNTIME = "live_queue_storage_runtime"
    STATE_IS_MIXED_TRANSITION = "state_is_mixed_transition"
    CANONICAL_BACKLOG_DRAINED = "canonical_backlog_drained"
    TRANSITION_IN_PROGRESS = "transition_in_progress"
    NO_QUEUE_STORAGE_ROWS = "no_queue_storage_rows"
    NO_LIVE_RUNTIME = "no_live_runtime"


class TransitionRefused(AwaError):
    """A transition step was refused; ``gate`` says which condition failed."""

    def __init__(self, gate: Gate, detail: str) -> None:
        super().__init__(f"storage transition refused by gate {gate.value}: {detail}")
        self.gate = gate
        self.detail = detail


def capability_for_role(role: TransitionRole | str) -> StorageCapability:
    """The capability a runtime of this package reports for its transition role.

    Every runtime of this package can execute queue storage, except one started to drain
    canonical storage only.
    """
    if TransitionRole(role) is TransitionRole.CANONICAL_DRAIN:
        return StorageCapability.CANONICAL_DRAIN_ONLY
    return StorageCapability.QUEUE_STORAGE


@attrs.frozen
class RuntimeView:
    """What the gates need to know about one registered runtime."""

    capability: StorageCapability
    live: bool


@attrs.frozen
class TransitionStatus:
    """The singleton row (``awa.storage_status()``)."""

    current_engine: str = CANONICAL_ENGINE
    active_engine: str = CANONICAL_ENGINE
    prepared_engine: str | None = None
    state: TransitionState = TransitionState.CANONICAL
    transition_epoch: int = 0
    details: Mapping[str, Any] = attrs.field(factory=dict)
    entered_at: datetime | None = None
    updated_at: datetime | None = None
    finalized_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TransitionStatus:
        """Build from a ``storage_status()`` row."""
        return cls(
            current_engine=row["current_engine"],
            active_engine=row["active_engine"],
            prepared_engine=row["prepared_engine"],
            state=TransitionState(row["state"]),
            transition_epoch=int(row["transition_epoch"]),
            details=dict(row["details"] or {}),
            entered_at=row["entered_at"],
            updated_at=row["updated_at"],
            finalized_at=row["finalized_at"],
        )

    def as_row(self) -> dict[str, Any]:
        """The ``storage_status()`` row this status reads from (:meth:`from_row`), with
        the state as its text."""
        return {
            "current_engine": self.current_engine,
            "active_engine": self.active_engine,
            "prepared_engine": self.prepared_engine,
            "state": self.state.value,
            "transition_epoch": self.transition_epoch,
            "details": dict(self.details),
            "entered_at": self.entered_at,
            "updated_at": self.updated_at,
            "finalized_at": self.finalized_at,
        }

    @property
    def schema(self) -> str:
        """The queue-storage schema this transition targets (``awa`` by default)."""
        value = self.details.get("schema")
        return value if isinstance(value, str) and value else DEFAULT_SCHEMA

    @property
    def producer_schema(self) -> str | None:
        """Where new jobs go: the queue-storage schema, or ``None`` for canonical."""
        return self.schema if producers_use_queue_storage(self.state) else None


def producers_use_queue_storage(state: TransitionState) -> bool:
    """New jobs go to queue storage from ``mixed_transition`` on."""
    return state in (TransitionState.MIXED_TRANSITION, TransitionState.ACTIVE)


def claims_canonical(state: TransitionState, role: TransitionRole | str) -> bool:
    """Whether a runtime claims from canonical storage in ``state``.

    Canonical is claimed until finalize (the drain); a drain-only runtime claims nothing else.
    """
    if TransitionRole(role) is TransitionRole.CANONICAL_DRAIN:
        return True
    return state is not TransitionState.ACTIVE


def claims_queue_storage(state: TransitionState, role: TransitionRole | str) -> bool:
    """Whether a runtime claims from queue storage in ``state``."""
    if TransitionRole(role) is TransitionRole.CANONICAL_DRAIN:
        return False
    return producers_use_queue_storage(state)


def maintains_canonical(state: TransitionState) -> bool:
    """Promotion and rescue run on canonical storage until the transition is finalized."""
    return state is not TransitionState.ACTIVE


def maintains_queue_storage(state: TransitionState) -> bool:
    """Promotion and rescue run on queue storage once producers write there."""
    return producers_use_queue_storage(state)


def check_prepare(status: TransitionStatus, engine: str, details: Any) -> None:
    """Gates of ``prepare``: from canonical / prepared, to queue storage, which differs from
    the current engine; details a JSON object whose ``schema`` is an identifier."""
    if status.state not in (TransitionState.CANONICAL, TransitionState.PREPARED):
        raise TransitionRefused(
            Gate.PREPARE_FROM_CANONICAL,
            f"prepare needs state canonical or prepared, the cluster is {status.state.value}",
        )
    if engine != QUEUE_STORAGE_ENGINE:
        raise TransitionRefused(
            Gate.ENGINE_IS_QUEUE_STORAGE,
            f"the only engine to prepare is queue_storage, got {engine}",
        )
    if engine == status.current_engine:
        raise TransitionRefused(
            Gate.ENGINE_DIFFERS_FROM_CURRENT, f"the cluster already runs {engine}"
        )
    if not isinstance(details, Mapping):
        raise TransitionRefused(Gate.DETAILS_IS_OBJECT, "details must be a JSON object")
    schema = details.get("schema") or DEFAULT_SCHEMA
    problem = schema_name_problem(schema)
    if problem is not None:
        raise TransitionRefused(Gate.SCHEMA_IS_IDENTIFIER, f"schema {problem}")


def enter_mixed_refusals(
    status: TransitionStatus,
    *,
    schema_installed: bool,
    runtimes: Iterable[RuntimeView],
    quiesced: bool = False,
) -> list[TransitionRefused]:
    """Every gate of ``enter-mixed-transition`` that fails now, in the order they are
    checked: prepared for queue storage, its schema built, no live canonical-only runtime,
    at least one live runtime able to run queue storage. ``quiesced`` is the flip with the
    whole fleet stopped: instead of the two runtime gates, no runtime may be live (the
    workers restarted afterwards start on the new routing)."""
    refused: list[TransitionRefused] = []
    if status.state is not TransitionState.PREPARED:
        refused.append(
            TransitionRefused(
                Gate.STATE_IS_PREPARED,
                f"enter-mixed-transition needs state prepared, the cluster is {status.state.value}",
            )
        )
    if status.prepared_engine != QUEUE_STORAGE_ENGINE:
        refused.append(
            TransitionRefused(
                Gate.ENGINE_IS_QUEUE_STORAGE, "the prepared engine is not queue_storage"
            )
        )
    if not schema_installed:
        refused.append(
            TransitionRefused(
                Gate.QUEUE_STORAGE_SCHEMA_INSTALLED,
                f"schema {status.schema} has no queue-storage tables",
            )
        )
    live = [r for r in runtimes if r.live]
    if quiesced:
        if live:
            refused.append(
                TransitionRefused(
                    Gate.NO_LIVE_RUNTIME,
                    f"{len(live)} runtime(s) still heartbeat; a quiesced flip needs every "
                    "worker stopped",
                )
            )
        return refused
    canonical_only = sum(1 for r in live if r.capability is StorageCapability.CANONICAL)
    if canonical_only:
        refused.append(
            TransitionRefused(
                Gate.NO_LIVE_CANONICAL_ONLY_RUNTIME,
                f"{canonical_only} live runtime(s) can only run canonical storage",
            )
        )
    if not any(r.capability is StorageCapability.QUEUE_STORAGE for r in live):
        refused.append(
            TransitionRefused(
                Gate.LIVE_QUEUE_STORAGE_RUNTIME, "no live runtime can execute queue storage"
            )
        )
    return refused


def check_enter_mixed(
    status: TransitionStatus,
    *,
    schema_installed: bool,
    runtimes: Iterable[RuntimeView],
    quiesced: bool = False,
) -> None:
    """Raise the first of :func:`enter_mixed_refusals`, if any."""
    refused = enter_mixed_refusals(
        status, schema_installed=schema_installed, runtimes=runtimes, quiesced=quiesced
    )
    if refused:
        raise refused[0]


def finalize_refusals(
    status: TransitionStatus, *, canonical_backlog: int
) -> list[TransitionRefused]:
    """Every gate of ``finalize`` that fails now: in mixed transition, with the canonical
    backlog drained."""
    refused: list[TransitionRefused] = []
    if status.state is not TransitionState.MIXED_TRANSITION:
        refused.append(
            TransitionRefused(
                Gate.STATE_IS_MIXED_TRANSITION,
                f"finalize needs state mixed_transition, the cluster is {status.state.value}",
            )
        )
    if canonical_backlog > 0:
        refused.append(
            TransitionRefused(
                Gate.CANONICAL_BACKLOG_DRAINED,
                f"{canonical_backlog} canonical job(s) are not finished yet",
            )
        )
    return refused


def check_finalize(status: TransitionStatus, *, canonical_backlog: int) -> None:
    """Raise the first of :func:`finalize_refusals`, if any."""
    refused = finalize_refusals(status, canonical_backlog=canonical_backlog)
    if refused:
        raise refused[0]


def status_report(
    status: TransitionStatus,
    *,
    canonical_backlog: int,
    schema_installed: bool,
    runtimes: Iterable[RuntimeView],
) -> dict[str, Any]:
    """The operator's view of the transition (``storage_status()``, ``awa storage
    status``): the status row plus what each next step is waiting for.

    ``schema_installed`` is whether the queue-storage schema this transition targets
    (:attr:`TransitionStatus.schema`) holds the engine's tables.
    """
    seen = list(runtimes)
    counts: dict[str, int] = {}
    for runtime in seen:
        if runtime.live:
            counts[runtime.capability.value] = counts.get(runtime.capability.value, 0) + 1
    prepared = status.prepared_engine == QUEUE_STORAGE_ENGINE
    enter = enter_mixed_refusals(status, schema_installed=schema_installed, runtimes=seen)
    final = finalize_refusals(status, canonical_backlog=canonical_backlog)
    return {
        **status.as_row(),
        "canonical_live_backlog": canonical_backlog,
        "prepared_queue_storage_schema": status.schema if prepared else None,
        "prepared_schema_ready": prepared and schema_installed,
        "live_runtime_capability_counts": dict(sorted(counts.items())),
        "can_enter_mixed_transition": not enter,
        "enter_mixed_transition_blockers": [r.detail for r in enter],
        "can_finalize": not final,
        "finalize_blockers": [r.detail for r in final],
    }


def check_abort(status: TransitionStatus, *, queue_storage_rows: bool) -> None:
    """Gates of ``abort``: a transition is in progress (or none was started: a canonical
    cluster is already where abort leads, so abort is a no-op there, as in awa-pg) and,
    once mixed, queue storage is still empty (jobs written there would be stranded by
    going back)."""
    if status.state is TransitionState.CANONICAL:
        return
    if status.state not in (TransitionState.PREPARED, TransitionState.MIXED_TRANSITION):
        raise TransitionRefused(
            Gate.TRANSITION_IN_PROGRESS,
            f"abort needs state prepared or mixed_transition, the cluster is {status.state.value}",
        )
    if status.state is TransitionState.MIXED_TRANSITION and queue_storage_rows:
        raise TransitionRefused(
            Gate.NO_QUEUE_STORAGE_ROWS, f"schema {status.schema} already holds queue-storage jobs"
        )


def is_fresh(
    status: TransitionStatus,
    *,
    schema: str,
    schema_installed: bool,
    has_jobs: bool,
    runtimes: Iterable[RuntimeView],
) -> bool:
    """Whether ``auto_finalize_if_fresh`` moves the cluster straight to ``active``."""
    if status.state not in (TransitionState.CANONICAL, TransitionState.PREPARED):
        return False
    if status.state is TransitionState.PREPARED and status.schema != schema:
        return False
    return schema_installed and not has_jobs and not any(r.live for r in runtimes)


def prepare(
    status: TransitionStatus, engine: str, details: Mapping[str, Any], now: datetime
) -> TransitionStatus:
    """The status after a successful ``prepare`` (gates checked first)."""
    check_prepare(status, engine, details)
    again = status.state is TransitionState.PREPARED
    merged = dict(details)
    merged["schema"] = details.get("schema") or DEFAULT_SCHEMA
    return attrs.evolve(
        status,
        prepared_engine=engine,
        state=TransitionState.PREPARED,
        details=merged,
        transition_epoch=status.transition_epoch + (0 if again else 1),
        entered_at=status.entered_at if again else now,
        updated_at=now,
        finalized_at=None,
    )


def enter_mixed(
    status: TransitionStatus,
    *,
    schema_installed: bool,
    runtimes: Iterable[RuntimeView],
    now: datetime,
    quiesced: bool = False,
) -> TransitionStatus:
    """The status after ``enter-mixed-transition``: producers now write to queue storage."""
    check_enter_mixed(
        status, schema_installed=schema_installed, runtimes=runtimes, quiesced=quiesced
    )
    return attrs.evolve(
        status,
        state=TransitionState.MIXED_TRANSITION,
        active_engine=QUEUE_STORAGE_ENGINE,
        transition_epoch=status.transition_epoch + 1,
        entered_at=now,
        updated_at=now,
    )


def finalize(
    status: TransitionStatus, *, canonical_backlog: int, now: datetime
) -> TransitionStatus:
    """The status after ``finalize``: queue storage is the only engine."""
    check_finalize(status, canonical_backlog=canonical_backlog)
    return _active(status, now, status.details)


def abort(status: TransitionStatus, *, queue_storage_rows: bool, now: datetime) -> TransitionStatus:
    """The status after ``abort``: back to canonical with nothing prepared (a canonical
    cluster is returned unchanged)."""
    check_abort(status, queue_storage_rows=queue_storage_rows)
    if status.state is TransitionState.CANONICAL:
        return status
    return attrs.evolve(
        status,
        current_engine=CANONICAL_ENGINE,
        active_engine=CANONICAL_ENGINE,
        prepared_engine=None,
        state=TransitionState.CANONICAL,
        details={},
        transition_epoch=status.transition_epoch + 1,
        entered_at=now,
        updated_at=now,
        finalized_at=None,
    )


def auto_finalize_if_fresh(
    status: TransitionStatus,
    *,
    schema: str,
    schema_installed: bool,
    has_jobs: bool,
    runtimes: Iterable[RuntimeView],
    now: datetime,
) -> TransitionStatus:
    """``active`` straight away for a fresh install; otherwise ``status`` unchanged."""
    if not is_fresh(
        status,
        schema=schema,
        schema_installed=schema_installed,
        has_jobs=has_jobs,
        runtimes=runtimes,
    ):
        return status
    details = dict(status.details)
    details.update({"schema": schema, "fresh_install": True})
    return _active(status, now, details)


def _active(
    status: TransitionStatus, now: datetime, details: Mapping[str, Any]
) -> TransitionStatus:
    return attrs.evolve(
        status,
        current_engine=QUEUE_STORAGE_ENGINE,
        active_engine=QUEUE_STORAGE_ENGINE,
        prepared_engine=None,
        state=TransitionState.ACTIVE,
        details=dict(details),
        transition_epoch=status.transition_epoch + 1,
        entered_at=now,
        updated_at=now,
        finalized_at=now,
    )


@attrs.frozen
class TransitionObservation:
    """What operators watch of the transition (the ``awa.storage.*`` gauges): the status,
    the canonical backlog while it matters (``prepared`` / ``mixed_transition``, else
    ``None``), whether the target schema is installed, and live runtimes by capability."""

    status: TransitionStatus
    canonical_backlog: int | None
    schema_installed: bool
    live_runtimes: Mapping[StorageCapability, int] = attrs.field(factory=dict)


def backlog_matters(state: TransitionState) -> bool:
    """The canonical backlog gates a step only while a transition is under way."""
    return state in (TransitionState.PREPARED, TransitionState.MIXED_TRANSITION)


def observation_report(observation: TransitionObservation) -> dict[str, Any]:
    """:func:`status_report` of an observation (a canonical backlog not read counts as 0:
    no step it gates is next then)."""
    return status_report(
        observation.status,
        canonical_backlog=observation.canonical_backlog or 0,
        schema_installed=observation.schema_installed,
        runtimes=[
            RuntimeView(capability, live=True)
            for capability, count in observation.live_runtimes.items()
            for _ in range(count)
        ],
    )
