"""Ports: the protocols the runtime and entrypoints use to reach storage and the world."""

from awa.ports.clock import Clock
from awa.ports.leader import LeaderLock
from awa.ports.notifier import Notifier, Subscription
from awa.ports.storage import (
    Ack,
    DlqFilter,
    JobFilter,
    Rescued,
    StorageEngine,
    UnitOfWork,
)

__all__ = [
    "Ack",
    "Clock",
    "DlqFilter",
    "JobFilter",
    "LeaderLock",
    "Notifier",
    "Rescued",
    "StorageEngine",
    "Subscription",
    "UnitOfWork",
]
