"""The storage engine that follows the staged transition (ADR 0007).

:class:`TransitionRoutingEngine` implements :class:`~awa.ports.StorageEngine` over a
canonical engine and the queue-storage engine of each schema, all in one store, and picks
between them by the transition state. It knows them, the store and the state only through
ports (:mod:`awa.ports.routing`, :mod:`awa.ports.transactions`,
:mod:`awa.ports.transition`); the composition root builds it (``awa.entrypoints.routing``):

* producers read the state inside their own transaction (the producers' share of the
  transition lock, which every step takes exclusively), so an insert lands in the engine
  the state names when it commits;
* claims use a state cached for ``refresh_interval`` seconds: canonical until finalize
  (first, to drain it), queue storage from ``mixed_transition`` on. Once the cache is
  older than that, the claim path starts a re-read in the background and keeps using the
  cached state until it lands, so no claim waits on it;
* a mutation of an attempt goes to the engine the attempt was claimed from (remembered per
  job id; otherwise looked up by id, which both engines share);
* maintenance reads the state afresh and runs on every engine the state keeps alive, and
  from ``mixed_transition`` on also moves the waiting canonical backlog into queue storage;
* admin reads and writes consult every engine that can hold the job;
* queue stripes (``queue_storage_queue_stripe_count``, ADR 0006) apply only where the
  route is queue storage: a producer renames its jobs to ``queue#k`` once the route is
  known, and a striped claim takes the logical queue on canonical and one stripe on queue
  storage.
"""

from __future__ import annotations

from awa.adapters.routing.admin import AdminOps
from awa.adapters.routing.base import C
from awa.adapters.routing.maintenance import MaintenanceOps
from awa.adapters.routing.producers import ProducerOps
from awa.adapters.routing.workers import WorkerOps


class TransitionRoutingEngine(ProducerOps[C], WorkerOps[C], MaintenanceOps[C], AdminOps[C]):
    """:class:`~awa.ports.StorageEngine` routing between canonical and queue storage.

    Also a :class:`~awa.ports.storage.StripedClaimer`, a
    :class:`~awa.ports.storage.WorkerWarmUp`, a
    :class:`~awa.ports.maintenance.RingMaintenance`, a
    :class:`~awa.ports.producers.StripedProducer`, a
    :class:`~awa.ports.transition.TransitionFollower`, and the notifier and leader-lock
    source of its store. The control-plane stores (batch operations, cron, overrides,
    descriptors) are not engines' business: the composition root builds them once per
    backend (:class:`~awa.ports.control_plane.ControlPlane`).
    """
