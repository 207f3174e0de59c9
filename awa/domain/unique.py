"""Unique-job keys: which parts of a job make it a duplicate, and the key material."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.states import DEFAULT_UNIQUE_STATES, mask_contains
from awa.domain.unique_conflict import SKIP, ConflictMode, parse_on_conflict
from awa.domain.validation import validate_period_bucket, validate_unique_states

if TYPE_CHECKING:
    from awa.domain.job import JobRecord

UNIQUE_KEY_LENGTH = 16


@attrs.frozen
class UniqueOpts:
    """``unique_opts``: key by kind, optionally by queue, args and a period bucket.

    ``by_period`` is the bucket itself (an integer the caller computes, e.g. the hour number),
    not a duration: two inserts collide only when they name the same bucket.
    ``on_conflict`` is what an insert does when a waiting job holds the key
    (:mod:`awa.domain.unique_conflict`, ADR 0034).
    """

    by_queue: bool = False
    by_args: bool = True
    by_period: int | None = None
    states: int = DEFAULT_UNIQUE_STATES
    on_conflict: ConflictMode = SKIP

    @classmethod
    def from_dict(cls, opts: dict[str, Any]) -> UniqueOpts:
        unknown = set(opts) - {"by_queue", "by_args", "by_period", "states", "on_conflict"}
        if unknown:
            raise ValidationError("unique_opts", f"unknown keys: {sorted(unknown)}")
        by_period = validate_period_bucket(opts.get("by_period"))
        return cls(
            by_queue=_flag(opts, "by_queue", False),
            by_args=_flag(opts, "by_args", True),
            by_period=by_period,
            states=validate_unique_states(opts.get("states", DEFAULT_UNIQUE_STATES)),
            on_conflict=parse_on_conflict(opts.get("on_conflict")),
        )


def _flag(opts: dict[str, Any], name: str, default: bool) -> bool:
    """A yes/no option: ``True`` or ``False`` only (``'yes'`` or ``0`` is a mistake that
    ``bool()`` would silently turn into a different key)."""
    value = opts.get(name, default)
    if not isinstance(value, bool):
        raise ValidationTypeError(
            f"unique_opts.{name}", f"must be true or false, got {type(value).__name__} {value!r}"
        )
    return value


def canonical_json(value: Any) -> bytes:
    """Sorted-key compact JSON, the stable form used in key material."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def unique_key_material(
    kind: str, *, queue: str | None, args: Any | None, period_bucket: int | None
) -> bytes:
    """``kind || 0x00 queue? || 0x00 sorted-JSON args? || 0x00 period_bucket (LE i64)?``."""
    parts = [kind.encode()]
    if queue is not None:
        parts.append(b"\x00" + queue.encode())
    if args is not None:
        parts.append(b"\x00" + canonical_json(args))
    if period_bucket is not None:
        parts.append(b"\x00" + struct.pack("<q", period_bucket))
    return b"".join(parts)


def derive_unique_key(
    digest: Callable[[bytes], bytes],
    kind: str,
    *,
    queue: str | None,
    args: Any | None,
    period_bucket: int | None,
) -> bytes:
    """The 16-byte unique key; ``digest`` is the hash function (BLAKE3 in production).

    With BLAKE3 the key is byte-identical to the one awa-pg 0.6.9 computes, so producers of
    both implementations deduplicate against each other.
    """
    material = unique_key_material(kind, queue=queue, args=args, period_bucket=period_bucket)
    return digest(material)[:UNIQUE_KEY_LENGTH]


def holds_unique_key(job: JobRecord | None) -> bool:
    """A job owns its unique key exactly while its state is inside its state mask
    (``DEFAULT_UNIQUE_STATES`` when the job names none)."""
    if job is None or job.unique_key is None:
        return False
    mask = DEFAULT_UNIQUE_STATES if job.unique_states is None else job.unique_states
    return mask_contains(mask, job.state)
