"""The in-memory engine: the reference model of the storage port, importing only the core."""

from awa.adapters.inmemory.core import InMemoryUnitOfWork
from awa.adapters.inmemory.engine import InMemoryEngine
from awa.adapters.inmemory.notifier import (
    InMemoryLeaderLock,
    InMemorySubscription,
    LeaderElection,
    NotificationHub,
)

__all__ = [
    "InMemoryEngine",
    "InMemoryLeaderLock",
    "InMemorySubscription",
    "InMemoryUnitOfWork",
    "LeaderElection",
    "NotificationHub",
]
