"""Time as a dependency, so engines and the runtime can run on a fake clock in tests."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC. Engines stamp every write with it."""
        ...
