"""Row conversion: database rows to domain values, in one place."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import cattrs

from awa.domain.admin_views import StateBucket
from awa.domain.job import DlqEntry, JobRecord
from awa.domain.states import JobState, bitstring_to_mask, mask_to_bitstring

_converter = cattrs.Converter()
_converter.register_structure_hook(JobState, lambda value, _: JobState.parse(value))
_converter.register_structure_hook(datetime, lambda value, _: value)
_converter.register_structure_hook(bytes, lambda value, _: bytes(value))

#: Columns of a job row the converter reads (the ``awa.jobs`` columns JobRecord models).
JOB_FIELDS = tuple(field.name for field in JobRecord.__attrs_attrs__)


def _normalise(row: Mapping[str, Any]) -> dict[str, Any]:
    data = {name: row[name] for name in JOB_FIELDS if name in row}
    if "id" not in data and "job_id" in row:
        data["id"] = row["job_id"]
    states = data.get("unique_states")
    if isinstance(states, str):
        data["unique_states"] = bitstring_to_mask(states)
    callback_id = data.get("callback_id")
    if isinstance(callback_id, uuid.UUID):
        data["callback_id"] = str(callback_id)
    if data.get("errors") is None:
        data["errors"] = ()
    if data.get("tags") is None:
        data["tags"] = ()
    if data.get("metadata") is None:
        data["metadata"] = {}
    return data


def job_from_row(row: Mapping[str, Any]) -> JobRecord:
    """A :class:`JobRecord` from a job row (bit(8) masks and uuids normalised)."""
    return _converter.structure(_normalise(row), JobRecord)


def dlq_from_row(row: Mapping[str, Any]) -> DlqEntry:
    """A :class:`DlqEntry` from a DLQ row (job columns plus reason, time and lease)."""
    return DlqEntry(
        job=job_from_row(row),
        reason=row["dlq_reason"],
        dlq_at=row["dlq_at"],
        original_run_lease=row["original_run_lease"],
    )


def mask_param(mask: int | None) -> str | None:
    """A unique-state mask as the ``bit(8)`` literal text Postgres accepts."""
    return None if mask is None else mask_to_bitstring(mask)


def state_buckets(rows: Sequence[Mapping[str, Any]]) -> list[StateBucket]:
    """Rows ``(bucket, state, n)`` as buckets, ordered by bucket then state name."""
    found = [
        StateBucket(bucket=row["bucket"], state=JobState.parse(row["state"]), count=int(row["n"]))
        for row in rows
    ]
    return sorted(found, key=lambda b: (b.bucket, str(b.state)))
