"""Awa: a Postgres-native background job queue.

``AsyncClient`` / ``Client`` enqueue and administer jobs; ``AsyncClient.task`` and
``AsyncClient.start`` run workers. Importing this package opens no connections.
"""

from awa import _awa as _awa
from awa import callback_contract
from awa._version import __version__
from awa.domain.errors import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    JobNotFound,
    SchemaNotMigrated,
    SerializationError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
)
from awa.domain.handler_results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa.domain.kinds import derive_kind
from awa.domain.queue_options import QueueConfigDict
from awa.domain.routing import PartitionedQueue
from awa.domain.states import JobState
from awa.entrypoints.bootstrap import (
    current_migration_version,
    migrate,
    migrations,
    migrations_range,
    schema_patches,
)
from awa.entrypoints.client import (
    AsyncClient,
    BatchOperation,
    BatchOperationFilter,
    BatchOperationKind,
    BatchOperationPreview,
    BatchOperationState,
    Client,
    DlqEntry,
    HealthCheck,
    Job,
    QueueHealth,
    QueueStat,
    RawClient,
    ResolveResult,
    RetryFailedResult,
    SyncTransaction,
    Transaction,
)
from awa.entrypoints.telemetry import init_telemetry, shutdown_telemetry

__all__ = [
    "AsyncClient",
    "AwaError",
    "BatchOperation",
    "BatchOperationFilter",
    "BatchOperationKind",
    "BatchOperationPreview",
    "BatchOperationState",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Client",
    "DatabaseError",
    "DlqEntry",
    "HealthCheck",
    "Job",
    "JobNotFound",
    "JobState",
    "PartitionedQueue",
    "QueueConfigDict",
    "QueueHealth",
    "QueueStat",
    "RawClient",
    "ResolveResult",
    "RetryAfter",
    "RetryFailedResult",
    "SchemaNotMigrated",
    "SerializationError",
    "Snooze",
    "SyncTransaction",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "__version__",
    "callback_contract",
    "current_migration_version",
    "derive_kind",
    "init_telemetry",
    "migrate",
    "migrations",
    "migrations_range",
    "schema_patches",
    "shutdown_telemetry",
]
