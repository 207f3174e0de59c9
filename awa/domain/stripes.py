"""Queue stripes: one logical queue stored as physical queues ``queue#0 .. queue#(N-1)``.

Striping belongs to the queue-storage engine (ADR 0006, "Stripes"): the canonical engine
has no stripes, so there a stripe count changes nothing. Producers and workers must agree
on the count; a job written under another count sits in a physical queue the fleet does
not claim (it is kept, never lost, and shows up under its physical name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from awa.domain.errors import ValidationError
from awa.domain.job import JobSpec

FIELD = "queue_storage_queue_stripe_count"
MIN_QUEUE_STRIPES = 1
MAX_QUEUE_STRIPES = 256
DEFAULT_QUEUE_STRIPES = 1
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_MASK64 = _U64_MAX


def validate_stripe_count(value: Any, *, field: str = FIELD) -> int:
    """``value`` as a stripe count: an ``int`` from 1 to :data:`MAX_QUEUE_STRIPES`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an integer, got {type(value).__name__}")
    if value < MIN_QUEUE_STRIPES:
        # awa-pg's words, which callers match on.
        raise ValidationError(field, f"{field} must be > 0, got {value}", value=value)
    if value > MAX_QUEUE_STRIPES:
        raise ValidationError(
            field, f"{field} must be at most {MAX_QUEUE_STRIPES}, got {value}", value=value
        )
    return value


def is_stripe_name(queue: str) -> bool:
    """Whether ``queue`` already names one stripe: the text after its last ``#`` is an
    unsigned 64-bit decimal (an optional ``+``, ASCII digits). Such a name is used as is,
    whatever the stripe count."""
    _, sep, suffix = queue.rpartition("#")
    if not sep:
        return False
    digits = suffix[1:] if suffix.startswith("+") else suffix
    if not digits or not all("0" <= c <= "9" for c in digits):
        return False
    return int(digits) <= _U64_MAX


def stripe_name(queue: str, index: int) -> str:
    return f"{queue}#{index}"


def stripe_queues(queue: str, stripes: int) -> list[str]:
    """The physical queues of ``queue`` under ``stripes`` stripes: ``[queue]`` for one
    stripe or for a name that already is a stripe, else ``queue#0 .. queue#(N-1)``."""
    if stripes <= 1 or is_stripe_name(queue):
        return [queue]
    return [stripe_name(queue, i) for i in range(stripes)]


# --------------------------------------------------------------------------- placement


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK64


def siphash(data: bytes, k0: int = 0, k1: int = 0, *, c_rounds: int = 1, d_rounds: int = 3) -> int:
    """SipHash of ``data`` with key ``(k0, k1)``; SipHash-1-3 by default (one compression
    round per word, three finalisation rounds)."""
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _MASK64
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK64
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK64
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK64
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    length = len(data)
    whole = length - length % 8
    for i in range(0, whole, 8):
        m = int.from_bytes(data[i : i + 8], "little")
        v3 ^= m
        rounds(c_rounds)
        v0 ^= m
    last = ((length & 0xFF) << 56) | int.from_bytes(data[whole:], "little")
    v3 ^= last
    rounds(c_rounds)
    v0 ^= last
    v2 ^= 0xFF
    rounds(d_rounds)
    return v0 ^ v1 ^ v2 ^ v3


def stripe_for_unique_key(unique_key: bytes, stripes: int) -> int:
    """The stripe of a unique job: SipHash-1-3 (zero key) of the key's length as a
    little-endian u64 followed by the key, modulo ``stripes``. The same key always lands
    on the same stripe, as in the original implementation."""
    data = len(unique_key).to_bytes(8, "little") + unique_key
    return siphash(data) % stripes


class StripeRotor:
    """Where the next batch starts when it spreads plain jobs round-robin over stripes.

    One rotor per producer (client), so a stream of single-job inserts also spreads over
    every stripe; a fresh producer starts at stripe 0.
    """

    def __init__(self) -> None:
        self._next = 0

    def take(self, n: int) -> int:
        """Reserve ``n`` consecutive positions; returns the first."""
        start = self._next
        self._next += n
        return start


def stripe_specs(specs: Sequence[JobSpec], stripes: int, rotor: StripeRotor) -> list[JobSpec]:
    """``specs`` renamed to their physical stripe. A job with a unique key goes to the
    stripe of its key; the others go round-robin in batch order from the rotor's position.
    Queues that already name a stripe are left alone; one stripe renames nothing."""
    if stripes <= 1:
        return list(specs)
    start = rotor.take(len(specs))
    out: list[JobSpec] = []
    for offset, spec in enumerate(specs):
        if is_stripe_name(spec.queue):
            out.append(spec)
            continue
        if spec.unique_key is not None:
            index = stripe_for_unique_key(spec.unique_key, stripes)
        else:
            index = (start + offset) % stripes
        out.append(attrs.evolve(spec, queue=stripe_name(spec.queue, index)))
    return out
