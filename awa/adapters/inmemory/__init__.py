"""The in-memory engine: the reference model of the storage port, importing only the core."""

from awa.adapters.inmemory.batch_ops import InMemoryBatchOperationStore
from awa.adapters.inmemory.cron import InMemoryCronStore
from awa.adapters.inmemory.descriptors import InMemoryDescriptorStore
from awa.adapters.inmemory.engine import InMemoryEngine
from awa.adapters.inmemory.notifier import (
    InMemoryLeaderLock,
    InMemorySubscription,
    LeaderElection,
    NotificationHub,
)
from awa.adapters.inmemory.overrides import InMemoryQueueOverrideStore
from awa.adapters.inmemory.results import InMemoryResultStore
from awa.adapters.inmemory.samples import InMemoryQueueSampleStore
from awa.adapters.inmemory.store import SharedStore
from awa.adapters.inmemory.transactions import (
    InMemoryTransaction,
    InMemoryTransactions,
    InMemoryUnitOfWork,
)
from awa.adapters.inmemory.transition import InMemoryTransition

__all__ = [
    "InMemoryBatchOperationStore",
    "InMemoryCronStore",
    "InMemoryDescriptorStore",
    "InMemoryEngine",
    "InMemoryLeaderLock",
    "InMemoryQueueOverrideStore",
    "InMemoryQueueSampleStore",
    "InMemoryResultStore",
    "InMemorySubscription",
    "InMemoryTransaction",
    "InMemoryTransactions",
    "InMemoryTransition",
    "InMemoryUnitOfWork",
    "LeaderElection",
    "NotificationHub",
    "SharedStore",
]
