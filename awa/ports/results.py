"""Stored results of the tasks that opt in (``store_result=True``) and the wake-ups of the
code waiting on them (``client.wait_for``).

One store per backend, in its control plane (:mod:`awa.ports.control_plane`); results
live apart from the job rows (``awa.job_results`` on Postgres), so a result outlives the
row of its job until its own ``expires_at`` (:mod:`awa.domain.results`).
``tests/contract/test_results.py`` is the executable form of these docstrings.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from awa.domain.results import StoredResult
from awa.ports.clock import Clock
from awa.ports.notifier import Subscription


@runtime_checkable
class ResultStore(Protocol):
    @property
    def clock(self) -> Clock:
        """The store's clock: results are stamped with its ``now()``, and a waiter's
        timeout, polls and subscription waits are measured on it (ADR 0025)."""
        ...

    async def store_result(self, job_id: int, json_text: str, *, kind: str | None = None) -> None:
        """Store ``json_text`` (already checked by ``awa.domain.results.encode_result``)
        as the result of ``job_id`` (of ``kind``, given back by :meth:`get_result`),
        replacing an earlier attempt's, kept for ``RESULT_RETENTION`` from now (the
        store's clock)."""
        ...

    async def get_result(self, job_id: int) -> StoredResult | None:
        """The stored result of ``job_id``, or ``None`` (none stored, or expired)."""
        ...

    async def announce_finished(self, job_id: int, *, completed: bool = False) -> None:
        """Tell the waiters on ``job_id`` that it finished (best effort). ``completed``:
        its completion is committed, so a waiter may answer with the stored result
        without reading the job (``awa.domain.results.announced_channels``)."""
        ...

    async def subscribe_finished(self, job_id: int) -> Subscription | None:
        """A subscription that fires when :meth:`announce_finished` is called for
        ``job_id`` (the channels ``announced_channels`` names), or ``None`` when this
        backend cannot deliver notifications here (a transaction-mode pooler): the
        waiter then polls only."""
        ...

    async def prune_results(self, *, before: datetime) -> int:
        """Delete the results that expired before ``before``; how many were deleted."""
        ...
