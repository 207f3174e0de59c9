"""Descriptors: operator-facing metadata about queues and job kinds, declared in code.

A runtime declares them before ``start()``; every runtime upserts its catalog into
``awa.queue_descriptors`` / ``awa.job_kind_descriptors`` at start and each snapshot tick
and publishes the hash of each descriptor in its ``awa.runtime_instances`` row. Readers
derive two flags, at read time, from what is stored:

* **stale**: no runtime has refreshed the descriptor for three of its sync intervals
  (at least 30 s), i.e. no live runtime declares it any more;
* **drift**: live runtimes publish different hashes for it (a rollout in progress, or
  two deployments disagreeing).

The leader deletes descriptors unseen for ``descriptor_retention`` (30 days; 0 keeps
them forever). The limits below are those of the table checks, whose names errors cite.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

import attrs

MAX_NAME = 200
MAX_DISPLAY_NAME = 200
MAX_OWNER = 200
MAX_DESCRIPTION = 2000
MAX_DOCS_URL = 2048
MAX_TAGS = 20
#: A descriptor is stale once unrefreshed for this many sync intervals (and >= 30 s).
STALE_AFTER_INTERVALS = 3
STALE_FLOOR = timedelta(seconds=30)

#: What each read-time flag means, as operators are told next to its badge.
STATUS_MEANINGS = {
    "stale": "no live runtime has refreshed this descriptor lately: no running worker "
    "declares it any more",
    "drift": "live runtimes declare different versions of this descriptor (a rollout in "
    "progress, or two deployments disagreeing)",
}

Catalog = Literal["queue", "job_kind"]
_TABLE = {"queue": "queue_descriptors", "job_kind": "job_kind_descriptors"}


def _tags(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


def _extra(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen
class Descriptor:
    """What a descriptor says about its queue or kind."""

    display_name: str | None = None
    description: str | None = None
    owner: str | None = None
    docs_url: str | None = None
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tags)
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_extra)

    def document(self) -> str:
        """The canonical text the descriptor hash is taken over: compact JSON with
        sorted keys (the hash awa-pg publishes is BLAKE3 of this text)."""
        return json.dumps(
            {
                "description": self.description,
                "display_name": self.display_name,
                "docs_url": self.docs_url,
                "extra": self.extra,
                "owner": self.owner,
                "tags": list(self.tags),
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )


@attrs.frozen
class StoredDescriptor:
    """A row of a descriptor table."""

    name: str
    descriptor: Descriptor
    descriptor_hash: str
    sync_interval_ms: int
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime


def limit_problem(catalog: Catalog, name: str, descriptor: Descriptor) -> str | None:
    """Why ``descriptor`` cannot be stored, naming the table check it breaks; ``None``
    when it fits."""
    table = _TABLE[catalog]
    key = "queue" if catalog == "queue" else "kind"
    checks: list[tuple[bool, str, str]] = [
        (not name, f"{table}_{key}_nonempty", f"the {key} name is empty"),
        (
            len(name) > MAX_NAME,
            f"{table}_{key}_length",
            f"the {key} name has {len(name)} characters, at most {MAX_NAME} allowed",
        ),
    ]
    for field, limit, check in (
        ("display_name", MAX_DISPLAY_NAME, "display_length"),
        ("description", MAX_DESCRIPTION, "description_len"),
        ("owner", MAX_OWNER, "owner_length"),
        ("docs_url", MAX_DOCS_URL, "docs_url_length"),
    ):
        value = getattr(descriptor, field)
        if value is not None and len(value) > limit:
            checks.append(
                (True, f"{table}_{check}", f"{field} has {len(value)} characters, at most {limit}")
            )
    count = len(descriptor.tags)
    checks.append((count > MAX_TAGS, f"{table}_tags_count", f"{count} tags, at most {MAX_TAGS}"))
    for broken, constraint, why in checks:
        if broken:
            return f'{catalog} descriptor {name!r}: {why} (check constraint "{constraint}")'
    return None


def is_stale(stored: StoredDescriptor, now: datetime) -> bool:
    """No runtime refreshed the descriptor within its staleness window."""
    window = max(
        timedelta(milliseconds=stored.sync_interval_ms * STALE_AFTER_INTERVALS), STALE_FLOOR
    )
    return stored.last_seen_at < now - window


def handler_missing(job_count: int, stale: bool | None) -> bool:
    """A kind has jobs but no running worker handles it: every runtime catalogues the
    kinds it handles, so such a kind has no descriptor (``stale`` is ``None``) or one no
    runtime refreshes any more."""
    return job_count > 0 and stale is not False


def has_drift(name: str, live_hashes: Iterable[Mapping[str, str]]) -> bool:
    """Live runtimes that declare ``name`` publish more than one hash for it."""
    seen = {hashes[name] for hashes in live_hashes if name in hashes}
    return len(seen) > 1


def is_live_runtime(last_seen_at: datetime, snapshot_interval_ms: int, now: datetime) -> bool:
    """A runtime is live while its snapshot is younger than three snapshot intervals
    (at least 30 s), the window the storage transition uses too."""
    window = max(timedelta(milliseconds=snapshot_interval_ms * 3), STALE_FLOOR)
    return last_seen_at >= now - window


def retention_cutoff(now: datetime, retention: timedelta) -> datetime | None:
    """Descriptors last seen before this are deleted; ``None``: retention is off (0)."""
    if retention <= timedelta(0):
        return None
    return now - retention
