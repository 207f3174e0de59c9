"""The queue-storage engine: append-only facts in rotating partitions (ADR 0006)."""

from awa.adapters.postgres_queue_storage.engine import QueueStorageEngine
from awa.adapters.postgres_queue_storage.install import install_queue_storage

__all__ = ["QueueStorageEngine", "install_queue_storage"]
