"""The public client module: ``AsyncClient``, ``Client`` and their value types."""

from awa.entrypoints._client_sync_generated import Client, RawClient
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.job import Job
from awa.entrypoints.results import (
    DEFAULT_QUEUE_STORAGE_CLAIM_SLOT_COUNT,
    DEFAULT_QUEUE_STORAGE_LEASE_SLOT_COUNT,
    DEFAULT_QUEUE_STORAGE_QUEUE_SLOT_COUNT,
    DEFAULT_QUEUE_STORAGE_QUEUE_STRIPE_COUNT,
    DEFAULT_QUEUE_STORAGE_SCHEMA,
    BatchOperation,
    BatchOperationFilter,
    BatchOperationKind,
    BatchOperationPreview,
    BatchOperationState,
    DlqEntry,
    HealthCheck,
    QueueHealth,
    QueueStat,
    ResolveResult,
    RetryFailedResult,
)
from awa.entrypoints.transaction import SyncTransaction, Transaction

__all__ = [
    "DEFAULT_QUEUE_STORAGE_CLAIM_SLOT_COUNT",
    "DEFAULT_QUEUE_STORAGE_LEASE_SLOT_COUNT",
    "DEFAULT_QUEUE_STORAGE_QUEUE_SLOT_COUNT",
    "DEFAULT_QUEUE_STORAGE_QUEUE_STRIPE_COUNT",
    "DEFAULT_QUEUE_STORAGE_SCHEMA",
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
]
