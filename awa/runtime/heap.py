"""Short full garbage collections while a runtime runs (``gc.freeze``).

A worker process holds tens of thousands of objects once it has started (its modules,
classes and functions, the driver's and the engine's caches): about 58,000 for one
queue. CPython's full (generation 2) collection visits every one of them. It runs about
once a minute under a steady load and takes 26-32 ms of the event loop on a quiet host,
40-70 ms on a busy one, and every job announced meanwhile waits it out.

Nearly all of those objects live as long as the process. So once a runtime has started,
they are frozen (moved to the permanent generation, which collections skip); full
collections then only visit what was allocated since, and take a fraction of a
millisecond. Only the young generations are collected first: a full collection at that
point found nothing to free in a started worker (0 unreachable objects) and held the
start for 57-81 ms on a busy host, while the garbage of start-up, if any, is young.
Reference counting still frees frozen objects; only a reference cycle among them outlives
its last use while they stay frozen. When the last runtime of the process stops, the
objects are unfrozen, so a process that goes on without a runtime collects as usual.

``AWA_GC_FREEZE=0`` (or ``false``, ``no``, ``off``) leaves the collector alone.
"""

from __future__ import annotations

import gc
import logging
import os

log = logging.getLogger("awa.runtime.heap")

ENV = "AWA_GC_FREEZE"
_OFF = ("0", "false", "no", "off")

_holders = 0


def enabled() -> bool:
    """Whether runtimes freeze the heap (``AWA_GC_FREEZE``; on unless turned off)."""
    return os.environ.get(ENV, "").strip().lower() not in _OFF


#: The oldest generation :func:`freeze` collects before freezing (not the full one).
YOUNG_GENERATION = 1


def freeze() -> bool:
    """Collect the young generations, then freeze what is alive; returns whether it did
    (see the module's docstring). Pair each ``True`` with :func:`thaw`."""
    global _holders
    if not enabled():
        return False
    gc.collect(YOUNG_GENERATION)
    gc.freeze()
    _holders += 1
    log.debug("froze %d objects for the runtime's lifetime", gc.get_freeze_count())
    return True


def thaw() -> None:
    """One runtime that froze the heap stopped; the last one unfreezes it."""
    global _holders
    _holders = max(0, _holders - 1)
    if _holders == 0:
        gc.unfreeze()
