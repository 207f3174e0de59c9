"""Schema administration: what operator commands ask of the database itself.

The CLI's ``migrate``, ``storage`` and ``health`` commands, ``awa queue stats`` and the
client's ``storage_status()`` read and drive the schema through this port (its
migration version, the storage-transition singleton, the runtimes that published a
snapshot) rather than through jobs. Both Postgres engines share one database and one
schema, so one Postgres adapter (:mod:`awa.adapters._pg.admin`) implements it for both;
the in-memory engine has no schema to administer.

Every read answers for a database at any migration version: what an older schema lacks
reads as ``None`` (or ``0`` for the version), never as an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from awa.domain.transition import TransitionStatus


@attrs.frozen
class RuntimeCounts:
    """Worker runtimes by health and storage capability, among those whose snapshot is
    younger than the live window (``max(3 x snapshot interval, 30 s)``)."""

    live: int
    unhealthy: int
    live_queue_storage_capable: int
    live_canonical_only: int

    def as_dict(self) -> dict[str, int]:
        """The counts by field name."""
        return attrs.asdict(self)


@runtime_checkable
class SchemaAdmin(Protocol):
    async def schema_version(self) -> int:
        """The newest migration recorded in the database; ``0`` when never migrated."""
        ...

    async def pending_schema_files(self) -> list[tuple[str, str]]:
        """The schema files (one per function or view) the next ``migrate`` applies after
        the migration stream, as ``(path, sql)`` in the order it applies them: those whose
        content the database has not applied, or whose object is missing."""
        ...

    async def transition_state(self) -> dict[str, Any] | None:
        """Every column of the storage-transition singleton row (``singleton`` left
        out), or ``None`` before the migration that creates it."""
        ...

    async def has_transition_functions(self) -> bool:
        """Whether the schema has the storage-transition functions (``storage_status``,
        ``storage_prepare`` and the other steps)."""
        ...

    async def storage_status(self) -> dict[str, Any] | None:
        """The transition status row (engines, state, epoch, details, timestamps) and
        what the next steps wait for (:func:`awa.domain.transition.status_report`: the
        canonical backlog, the prepared schema, live runtimes by capability and every
        blocker of entering the mixed transition and of finalizing), or ``None`` without
        the transition functions."""
        ...

    async def transition_backlog(self) -> dict[str, Any] | None:
        """``active_queue_storage_schema`` and ``canonical_live_backlog`` (canonical jobs
        not yet terminal), or ``None`` when the schema cannot report them."""
        ...

    async def rebuild_terminal_counters(self) -> tuple[str, int] | None:
        """Recount the active queue-storage schema's per-queue state counters from its
        jobs, in one transaction; ``(schema, counters written)``, or ``None`` when no
        queue-storage schema is active (canonical storage keeps no counters)."""
        ...

    async def ring_maintenance(self) -> list[dict[str, Any]] | None:
        """What the maintenance leader last recorded per queue-storage schema and
        concern (prune outcomes, the transaction it waits for), ordered by schema and
        concern; ``None`` when the schema has no such record."""
        ...

    async def runtime_counts(self) -> RuntimeCounts | None:
        """Counts of the runtimes that published a snapshot, or ``None`` without the
        registry table."""
        ...

    async def leader_lease(self) -> dict[str, Any] | None:
        """The maintenance leader's lease (ADR 0014): ``holder`` (``host/pid/random``),
        ``term``, ``live`` (not yet expired on the server's clock), ``expires_in``
        seconds, ``acquired_at``, ``renewed_at``, ``expires_at``; ``None`` before anybody
        held it or before the migration that creates it."""
        ...

    async def served_queues(self) -> frozenset[str]:
        """The logical queues (a stripe ``name#N`` counts as ``name``) that at least one
        live runtime, not shutting down, serves."""
        ...

    async def prepare(self, engine: str, details: Mapping[str, Any]) -> TransitionStatus:
        """Prepare the transition to ``engine``; a refused step raises
        :class:`~awa.domain.transition.TransitionRefused` naming its gate."""
        ...

    async def enter_mixed_transition(self, *, quiesced: bool = False) -> TransitionStatus:
        """Route new jobs to queue storage while canonical storage drains. ``quiesced``:
        the fleet is stopped; refused while any runtime heartbeats, instead of needing a
        live queue-storage runtime."""
        ...

    async def finalize(self) -> TransitionStatus:
        """Make queue storage the only engine (refused while canonical jobs remain)."""
        ...

    async def check_finalize(self) -> TransitionStatus:
        """Run :meth:`finalize`, gates included, and roll it back: the status it would
        reach, or its refusal. Changes nothing."""
        ...

    async def finalize_when_drained(self, timeout: float) -> TransitionStatus:
        """Retry :meth:`finalize` while only the canonical backlog holds it back, for at
        most ``timeout`` seconds; any other refusal (or that one at the deadline) is
        raised."""
        ...

    async def abort(self) -> TransitionStatus:
        """Go back to canonical storage (from prepared, or from mixed while queue
        storage holds no job)."""
        ...

    async def install_queue_storage_schema(
        self, schema: str, *, queue_slot_count: int, lease_slot_count: int, reset: bool
    ) -> bool:
        """Build (idempotently, or with ``reset`` from scratch) the queue-storage tables
        in ``schema`` with these ring sizes; returns whether they are installed after."""
        ...

    async def close(self) -> None:
        """Release what this handle holds (a dedicated connection); idempotent."""
        ...
