"""Descriptor rules: limits, the published hash, and the read-time stale / drift flags."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from awa.domain.descriptors import (
    Descriptor,
    StoredDescriptor,
    has_drift,
    is_live_runtime,
    is_stale,
    limit_problem,
    retention_cutoff,
)
from awa.entrypoints.args import blake3_digest
from awa.entrypoints.client_descriptors import declared

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def test_the_hash_is_the_one_awa_pg_publishes() -> None:
    # Values observed in awa.runtime_instances of an awa-pg 0.6.9 worker.
    queue = Descriptor(display_name="Email2")
    kind = Descriptor(display_name="Tick", description="ticks")
    digest = blake3_digest(queue.document().encode()).hex()
    assert digest == "0c426749d14350a987906cacf9ff383c28fddb15e439ff9e5399ea4c365ee3a8"
    (item,) = declared("job_kind", {"tick": kind})
    assert item.descriptor_hash == (
        "77a5c15b3681437c4a699713f99f43c8c36368b888a3ac92948df0563f172c61"
    )


@pytest.mark.parametrize(
    ("descriptor", "constraint"),
    [
        (Descriptor(display_name="x" * 201), "queue_descriptors_display_length"),
        (Descriptor(description="x" * 2001), "queue_descriptors_description_len"),
        (Descriptor(owner="x" * 201), "queue_descriptors_owner_length"),
        (Descriptor(docs_url="x" * 2049), "queue_descriptors_docs_url_length"),
        (Descriptor(tags=tuple(str(i) for i in range(21))), "queue_descriptors_tags_count"),
    ],
)
def test_limits_name_the_check_they_break(descriptor: Descriptor, constraint: str) -> None:
    problem = limit_problem("queue", "email", descriptor)
    assert problem is not None and f'"{constraint}"' in problem


def test_descriptors_at_the_limits_fit() -> None:
    fits = Descriptor(
        display_name="x" * 200,
        description="y" * 2000,
        owner="o" * 200,
        docs_url="z" * 2048,
        tags=tuple(str(i) for i in range(20)),
    )
    assert limit_problem("job_kind", "k" * 200, fits) is None
    assert "job_kind_descriptors_kind_length" in (limit_problem("job_kind", "k" * 201, fits) or "")


def _stored(last_seen: datetime, interval_ms: int = 10_000) -> StoredDescriptor:
    return StoredDescriptor("q", Descriptor(), "h", interval_ms, last_seen, last_seen, last_seen)


def test_stale_after_three_intervals_and_at_least_thirty_seconds() -> None:
    assert not is_stale(_stored(NOW - timedelta(seconds=29)), NOW)
    assert is_stale(_stored(NOW - timedelta(seconds=31)), NOW)
    assert not is_stale(_stored(NOW - timedelta(seconds=50), 20_000), NOW)
    assert is_stale(_stored(NOW - timedelta(seconds=61), 20_000), NOW)


def test_drift_is_disagreement_among_live_runtimes() -> None:
    assert not has_drift("q", [{"q": "a"}, {"q": "a"}, {"other": "b"}])
    assert has_drift("q", [{"q": "a"}, {"q": "b"}])
    assert not has_drift("q", [])
    assert is_live_runtime(NOW - timedelta(seconds=29), 10_000, NOW)
    assert not is_live_runtime(NOW - timedelta(seconds=31), 10_000, NOW)


def test_retention_zero_keeps_everything() -> None:
    assert retention_cutoff(NOW, timedelta(0)) is None
    assert retention_cutoff(NOW, timedelta(days=30)) == NOW - timedelta(days=30)
