"""The worker runtime: dispatch, execution, heartbeats and maintenance, over the ports.

Names are imported from their modules on first use (as in ``awa`` and ``awa.domain``), so
importing one runtime module (``awa.runtime.tracing``, say) does not load the dispatcher,
the executor and the maintenance loops."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.runtime.config import QueueConfig, RateLimit, RuntimeConfig, parse_start_args
    from awa.runtime.context import AttemptContext, AttemptLost
    from awa.runtime.handlers import HandlerEntry, HandlerRegistry, JobFactory
    from awa.runtime.runtime import QueueHealth, Runtime, RuntimeHealth

_LAZY = {
    **dict.fromkeys(
        ("QueueConfig", "RateLimit", "RuntimeConfig", "parse_start_args"), "awa.runtime.config"
    ),
    **dict.fromkeys(("AttemptContext", "AttemptLost"), "awa.runtime.context"),
    **dict.fromkeys(("HandlerEntry", "HandlerRegistry", "JobFactory"), "awa.runtime.handlers"),
    **dict.fromkeys(("QueueHealth", "Runtime", "RuntimeHealth"), "awa.runtime.runtime"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'awa.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AttemptContext",
    "AttemptLost",
    "HandlerEntry",
    "HandlerRegistry",
    "JobFactory",
    "QueueConfig",
    "QueueHealth",
    "RateLimit",
    "Runtime",
    "RuntimeConfig",
    "RuntimeHealth",
    "parse_start_args",
]
