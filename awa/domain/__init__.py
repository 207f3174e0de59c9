"""The pure domain core: value types, policies and rules. No I/O, no clock reads.

Names are imported from their modules on first use, so importing one domain module (the
error types, say) does not load the others."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.domain.errors import (
        AwaError,
        CallbackNotFound,
        DatabaseError,
        IllegalTransition,
        SchemaNotMigrated,
        SerializationError,
        TerminalError,
        UniqueConflict,
        UnknownJobKind,
        ValidationError,
    )
    from awa.domain.job import (
        Claim,
        DlqEntry,
        JobRecord,
        JobSpec,
        Lane,
        QueueCounts,
        Receipt,
        RunLease,
    )
    from awa.domain.kinds import derive_kind
    from awa.domain.lifecycle import DlqReason, Rescue, Transition, error_entry
    from awa.domain.partitioning import PartitionedQueue, ordering_hash, shard_for_key
    from awa.domain.policies import Backoff, PriorityAging, RetentionFloor
    from awa.domain.states import JobState, check_transition, is_legal_transition
    from awa.domain.validation import validate_spec

_LAZY = {
    "AwaError": "awa.domain.errors",
    "CallbackNotFound": "awa.domain.errors",
    "DatabaseError": "awa.domain.errors",
    "IllegalTransition": "awa.domain.errors",
    "SchemaNotMigrated": "awa.domain.errors",
    "SerializationError": "awa.domain.errors",
    "TerminalError": "awa.domain.errors",
    "UniqueConflict": "awa.domain.errors",
    "UnknownJobKind": "awa.domain.errors",
    "ValidationError": "awa.domain.errors",
    "Claim": "awa.domain.job",
    "DlqEntry": "awa.domain.job",
    "JobRecord": "awa.domain.job",
    "JobSpec": "awa.domain.job",
    "Lane": "awa.domain.job",
    "QueueCounts": "awa.domain.job",
    "Receipt": "awa.domain.job",
    "RunLease": "awa.domain.job",
    "derive_kind": "awa.domain.kinds",
    "DlqReason": "awa.domain.lifecycle",
    "Rescue": "awa.domain.lifecycle",
    "Transition": "awa.domain.lifecycle",
    "error_entry": "awa.domain.lifecycle",
    "Backoff": "awa.domain.policies",
    "PriorityAging": "awa.domain.policies",
    "RetentionFloor": "awa.domain.policies",
    "PartitionedQueue": "awa.domain.partitioning",
    "ordering_hash": "awa.domain.partitioning",
    "shard_for_key": "awa.domain.partitioning",
    "JobState": "awa.domain.states",
    "check_transition": "awa.domain.states",
    "is_legal_transition": "awa.domain.states",
    "validate_spec": "awa.domain.validation",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'awa.domain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AwaError",
    "Backoff",
    "CallbackNotFound",
    "Claim",
    "DatabaseError",
    "DlqEntry",
    "DlqReason",
    "IllegalTransition",
    "JobRecord",
    "JobSpec",
    "JobState",
    "Lane",
    "PartitionedQueue",
    "PriorityAging",
    "QueueCounts",
    "Receipt",
    "Rescue",
    "RetentionFloor",
    "RunLease",
    "SchemaNotMigrated",
    "SerializationError",
    "TerminalError",
    "Transition",
    "UniqueConflict",
    "UnknownJobKind",
    "ValidationError",
    "check_transition",
    "derive_kind",
    "error_entry",
    "is_legal_transition",
    "ordering_hash",
    "shard_for_key",
    "validate_spec",
]
