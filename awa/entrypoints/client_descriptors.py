"""Descriptors on the client: building declared ones and reading the catalogs with their
stale / drift flags (derived at read time, see :mod:`awa.domain.descriptors`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

from awa.domain.descriptors import (
    Catalog,
    Descriptor,
    StoredDescriptor,
    has_drift,
    is_live_runtime,
    is_stale,
    limit_problem,
)
from awa.domain.errors import AwaError, DatabaseError
from awa.domain.keywords import check_keywords
from awa.entrypoints.args import blake3_digest, to_json_value
from awa.entrypoints.client_core import ClientCore
from awa.ports.descriptors import DeclaredDescriptor


def _text(field: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{field} must be a string, got {type(value).__name__}")
    return value


class DescriptorOptions(TypedDict, total=False):
    """The keywords of ``queue_descriptor()`` and ``job_kind_descriptor()``, declared once
    (ADR 0027); every one may be left out. Their length limits are checked at ``start()``
    (see ``queue_descriptor``)."""

    display_name: str | None
    """A human name for the admin UI."""
    description: str | None
    """What it is for."""
    owner: str | None
    """Who to ask."""
    docs_url: str | None
    """Where its documentation is."""
    tags: list[str] | None
    """Labels."""
    extra: dict[str, Any] | None
    """Any other JSON object to show with it."""


def build_descriptor(function: str, options: DescriptorOptions) -> Descriptor:
    """A descriptor from ``queue_descriptor`` / ``job_kind_descriptor`` keywords (a keyword
    they do not take raises ``TypeError`` naming ``function``). Its length limits are
    checked at ``start()``, as awa-pg does (:func:`declared`)."""
    check_keywords(function, options, DescriptorOptions)
    tags = options.get("tags")
    if tags is not None and not all(isinstance(tag, str) for tag in tags):
        raise TypeError("tags must be a list of strings")
    return Descriptor(
        display_name=_text("display_name", options.get("display_name")),
        description=_text("description", options.get("description")),
        owner=_text("owner", options.get("owner")),
        docs_url=_text("docs_url", options.get("docs_url")),
        tags=tuple(tags or ()),
        extra=to_json_value(options.get("extra") or {}),
    )


def declared(catalog: Catalog, items: Mapping[str, Descriptor]) -> list[DeclaredDescriptor]:
    """The descriptors with their hashes; one over a table limit raises
    ``DatabaseError`` naming the limit and its check constraint (nothing is written)."""
    result: list[DeclaredDescriptor] = []
    for name, descriptor in items.items():
        problem = limit_problem(catalog, name, descriptor)
        if problem is not None:
            raise DatabaseError(problem)
        digest = blake3_digest(descriptor.document().encode()).hex()
        result.append(DeclaredDescriptor(name, descriptor, digest))
    return result


def with_served(explicit: Mapping[str, Descriptor], served: Iterable[str]) -> dict[str, Descriptor]:
    """The descriptors a runtime keeps fresh: the declared ones plus an empty one for each
    queue it serves or kind it handles that has none, as awa-pg does. So the catalogs
    list every served queue and handled kind, and a kind with jobs but no descriptor
    refreshed by a live runtime is one no running worker handles."""
    found = dict(explicit)
    for name in sorted(served):
        found.setdefault(name, Descriptor())
    return found


def check_descriptor_queues(queues: Mapping[str, Descriptor], configured: set[str]) -> None:
    """A queue descriptor must describe a queue the runtime serves."""
    for name in queues:
        if name not in configured:
            raise AwaError(f"queue descriptor declared for unknown queue {name!r}")


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def descriptor_dict(
    stored: StoredDescriptor, key: str, live_hashes: list[dict[str, str]], now: datetime
) -> dict[str, Any]:
    """A catalog row with its read-time ``stale`` and ``drift`` flags."""
    d = stored.descriptor
    return {
        key: stored.name,
        "display_name": d.display_name,
        "description": d.description,
        "owner": d.owner,
        "docs_url": d.docs_url,
        "tags": list(d.tags),
        "extra": d.extra,
        "descriptor_hash": stored.descriptor_hash,
        "sync_interval_ms": stored.sync_interval_ms,
        "created_at": _utc(stored.created_at),
        "updated_at": _utc(stored.updated_at),
        "last_seen_at": _utc(stored.last_seen_at),
        "stale": is_stale(stored, now),
        "drift": has_drift(stored.name, live_hashes),
    }


class DescriptorsMixin(ClientCore):
    """Reads of the descriptor catalogs."""

    async def _catalog(self, catalog: Catalog, key: str) -> list[dict[str, Any]]:
        wiring = await self._wiring()
        stored = await wiring.control.descriptors.list_descriptors(catalog)
        now = datetime.now(UTC)
        runtimes = await wiring.control.registry.list_runtimes()
        live = [
            r.queue_descriptor_hashes if catalog == "queue" else r.job_kind_descriptor_hashes
            for r in runtimes
            if is_live_runtime(r.last_seen_at, r.snapshot_interval_ms, now)
        ]
        return [descriptor_dict(s, key, live, now) for s in stored]

    async def list_queue_descriptors(self) -> list[dict[str, Any]]:
        """Rows of ``awa.queue_descriptors`` with read-time ``stale`` (no live runtime
        refreshes it) and ``drift`` (live runtimes disagree on its hash) flags."""
        return await self._catalog("queue", "queue")

    async def list_job_kind_descriptors(self) -> list[dict[str, Any]]:
        """Rows of ``awa.job_kind_descriptors`` with ``stale`` and ``drift`` flags."""
        return await self._catalog("job_kind", "kind")
