"""The pure domain core: value types, policies and rules. No I/O, no clock reads."""

from awa.domain.errors import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    IllegalTransition,
    SchemaNotMigrated,
    SerializationError,
    StorageTransitionRefused,
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
from awa.domain.policies import Backoff, PriorityAging, RetentionFloor
from awa.domain.routing import PartitionedQueue, ordering_hash, shard_for_key
from awa.domain.states import JobState, check_transition, is_legal_transition
from awa.domain.validation import validate_spec

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
    "StorageTransitionRefused",
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
