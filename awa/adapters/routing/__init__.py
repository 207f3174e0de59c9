"""The routing engine: one storage port over the engines of a staged transition (ADR 0007).

It imports the domain and the ports only; the composition root hands it its engines.
"""

from awa.adapters.routing.base import DEFAULT_REFRESH_INTERVAL, RoutingUnitOfWork
from awa.adapters.routing.engine import TransitionRoutingEngine
from awa.adapters.routing.producers import COPY_NEEDS_QUEUE_STORAGE

__all__ = [
    "COPY_NEEDS_QUEUE_STORAGE",
    "DEFAULT_REFRESH_INTERVAL",
    "RoutingUnitOfWork",
    "TransitionRoutingEngine",
]
