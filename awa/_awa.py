"""The names awa-pg's compiled extension module ``awa._awa`` exports, so code that imports
them from there keeps working. ``Client`` here is the raw client (``awa.RawClient``), as in
awa-pg; the blocking client is ``awa.Client``."""

from awa.callback_contract import (
    CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS,
    CALLBACK_DEFAULT_PATH_PREFIX,
    CALLBACK_SIGNATURE_HEADER,
    build_callback_url,
    sign_callback,
    verify_callback,
)
from awa.domain.errors import (
    AwaError,
    CallbackNotFound,
    DatabaseError,
    SchemaNotMigrated,
    SerializationError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
)
from awa.domain.handler_results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa.domain.kinds import derive_kind
from awa.domain.partitioning import PartitionedQueue
from awa.domain.states import JobState
from awa.entrypoints.bootstrap import (
    current_migration_version,
    migrate,
    migrations,
    migrations_range,
    schema_patches,
)
from awa.entrypoints.client import (
    DlqEntry,
    HealthCheck,
    Job,
    QueueHealth,
    QueueStat,
    ResolveResult,
    RetryFailedResult,
    SyncTransaction,
    Transaction,
)
from awa.entrypoints.client import RawClient as Client
from awa.entrypoints.telemetry import init_telemetry, shutdown_telemetry

__all__ = [
    "CALLBACK_DEFAULT_HEARTBEAT_TIMEOUT_SECS",
    "CALLBACK_DEFAULT_PATH_PREFIX",
    "CALLBACK_SIGNATURE_HEADER",
    "AwaError",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Client",
    "DatabaseError",
    "DlqEntry",
    "HealthCheck",
    "Job",
    "JobState",
    "PartitionedQueue",
    "QueueHealth",
    "QueueStat",
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
    "build_callback_url",
    "current_migration_version",
    "derive_kind",
    "init_telemetry",
    "migrate",
    "migrations",
    "migrations_range",
    "schema_patches",
    "shutdown_telemetry",
    "sign_callback",
    "verify_callback",
]
