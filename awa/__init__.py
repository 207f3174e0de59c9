"""Awa: a Postgres-native background job queue.

``AsyncClient`` / ``Client`` enqueue and administer jobs; ``AsyncClient.task`` and
``AsyncClient.start`` run workers. Importing this package opens no connections.

``import awa`` loads the error types, job states and handler results only; the client,
the Postgres driver and the worker runtime are imported the first time one of their names
is used (``awa.AsyncClient``, ``from awa import Client``), so an app module, a test or a
CLI that never builds a client does not pay for them (ADR 0018).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from awa.domain.held_back import HeldBack
from awa.domain.kinds import derive_kind
from awa.domain.partitioning import PartitionedQueue
from awa.domain.policies import RetryPolicy
from awa.domain.queue_options import QueueConfigDict
from awa.domain.results import JobCancelled, JobFailed
from awa.domain.states import JobState
from awa.domain.unique_conflict import InsertOutcome

if TYPE_CHECKING:
    from awa import _awa as _awa
    from awa.entrypoints.batches import Batch, BatchCounts
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
    from awa.entrypoints.workflow import Dependency, Step, Workflow

#: Public names imported on first use, by the module that defines them.
_LAZY = {
    **dict.fromkeys(
        (
            "current_migration_version",
            "migrate",
            "migrations",
            "migrations_range",
            "schema_patches",
        ),
        "awa.entrypoints.bootstrap",
    ),
    **dict.fromkeys(
        (
            "AsyncClient",
            "BatchOperation",
            "BatchOperationFilter",
            "BatchOperationKind",
            "BatchOperationPreview",
            "BatchOperationState",
            "Client",
            "DlqEntry",
            "HealthCheck",
            "Job",
            "QueueHealth",
            "QueueStat",
            "RawClient",
            "ResolveResult",
            "RetryFailedResult",
            "SyncTransaction",
            "Transaction",
        ),
        "awa.entrypoints.client",
    ),
    "Batch": "awa.entrypoints.batches",
    "BatchCounts": "awa.entrypoints.batches",
    "Dependency": "awa.entrypoints.workflow",
    "Step": "awa.entrypoints.workflow",
    "Workflow": "awa.entrypoints.workflow",
    "init_telemetry": "awa.entrypoints.telemetry",
    "shutdown_telemetry": "awa.entrypoints.telemetry",
}


def __getattr__(name: str) -> Any:
    if name == "_awa":
        return importlib.import_module("awa._awa")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'awa' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "_awa"})


__all__ = [
    "AsyncClient",
    "AwaError",
    "Batch",
    "BatchCounts",
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
    "Dependency",
    "DlqEntry",
    "HealthCheck",
    "HeldBack",
    "InsertOutcome",
    "Job",
    "JobCancelled",
    "JobFailed",
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
    "RetryPolicy",
    "SchemaNotMigrated",
    "SerializationError",
    "Snooze",
    "Step",
    "SyncTransaction",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "Workflow",
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
