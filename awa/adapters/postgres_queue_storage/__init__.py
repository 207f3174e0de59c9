"""The queue-storage engine: append-only facts in rotating partitions (ADR 0006).

Its names are imported on first use, so a module that needs one part (the connection
budget in ``connections``, say) does not load the engine and its 23 parts."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.adapters.postgres_queue_storage.engine import QueueStorageEngine
    from awa.adapters.postgres_queue_storage.install import install_queue_storage

_LAZY = {
    "QueueStorageEngine": "awa.adapters.postgres_queue_storage.engine",
    "install_queue_storage": "awa.adapters.postgres_queue_storage.install",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(
            f"module 'awa.adapters.postgres_queue_storage' has no attribute {name!r}"
        )
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["QueueStorageEngine", "install_queue_storage"]
