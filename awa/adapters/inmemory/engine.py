"""The in-memory reference engine: the executable specification of the storage port."""

from __future__ import annotations

from awa.adapters.inmemory.admin import AdminOps
from awa.adapters.inmemory.batch_ops import BatchOps
from awa.adapters.inmemory.callbacks import CallbackOps
from awa.adapters.inmemory.core import CoreOps


class InMemoryEngine(CoreOps, CallbackOps, AdminOps, BatchOps):
    """A complete :class:`~awa.ports.StorageEngine` held in process memory.

    Written for clarity, not speed: every write copies the state, applies the change
    through the domain's transition table and swaps the copy in, so a refused change
    (unique conflict, illegal transition) leaves nothing behind. It is also the
    :class:`~awa.ports.Notifier` for its own notifications (:meth:`subscribe`) and hands
    out leader-lock candidates (:meth:`leader_lock`) over one shared slot.

    Construct it with the clock every timestamp is taken from and the retry backoff
    policy (inject ``Backoff(jitter=lambda: 0.0)`` for deterministic tests).
    """
