"""A client bound to the in-memory engine: no Postgres, same enqueue and admin calls."""

from __future__ import annotations

from collections.abc import Sequence

from awa.adapters.clock import SystemClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.job import JobRecord, JobSpec
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES
from awa.entrypoints.bootstrap import Wiring
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.client_core import ClientCore
from awa.entrypoints.routing import inmemory_control_plane
from awa.ports.storage import UnitOfWork
from awa.runtime.handlers import HandlerRegistry

MEMORY_URL = "memory:"


class _ClientMemoryEngine(InMemoryEngine):
    """The in-memory engine with the client's enqueue keywords; it has one lane per
    queue, so only ``stripes=1`` is accepted."""

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        _one_stripe(stripes)
        return await super().enqueue_many(specs, uow=uow)

    async def enqueue_many_skip_duplicates(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]:
        _one_stripe(stripes)
        return await super().enqueue_many_skip_duplicates(specs)

    async def enqueue_many_copy(
        self,
        specs: Sequence[JobSpec],
        *,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> int:
        _one_stripe(stripes)
        return len(await super().enqueue_many(specs))


def _one_stripe(stripes: int) -> None:
    if stripes != 1:
        raise ValueError("the in-memory engine has no queue stripes: use stripe count 1")


def memory_client(handlers_from: AsyncClient | None = None) -> AsyncClient:
    """An :class:`~awa.AsyncClient` on a fresh in-memory engine.

    ``insert``, ``get_job``, ``list_jobs``, the admin calls and the helpers
    (:func:`~awa.testing.work_next`, :func:`~awa.testing.drain`) work as on Postgres;
    ``transaction()``, ``start()`` and raw SQL need a database. With ``handlers_from``,
    the handlers registered on that client (the application's) are the ones run."""
    client = AsyncClient.__new__(AsyncClient)
    ClientCore._init_state(client, MEMORY_URL, 1)
    # The application's handlers, and the per-kind policies they carry for the engine.
    client._use_handlers(
        handlers_from._handlers if handlers_from is not None else HandlerRegistry(client._policies)
    )
    clock = SystemClock()
    engine = _ClientMemoryEngine(clock, policies=client._policies)
    client._wiring_obj = Wiring(
        url=MEMORY_URL,
        engine=engine,  # type: ignore[arg-type]
        control=inmemory_control_plane(engine, clock),
        policies=client._policies,
    )
    client._runtime = None
    client._runtime_resources = None
    return client
