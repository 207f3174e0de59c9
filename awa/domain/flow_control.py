"""Per-key concurrency: the rule a claim applies to jobs that carry a concurrency key.

A job inserted with ``concurrency_key="tenant-42"`` into a queue whose config says
``"max_running_per_key": N`` is claimed only while fewer than ``N`` attempts of that key
hold a slot (ADR 0029). This module is the one statement of that rule; each engine
applies it inside its claim's own transaction, and the in-memory model runs it as
written:

- **What holds a slot.** An attempt in ``running`` or ``waiting_external`` (parked on a
  callback). Every way out of those states (completion, retry, failure, cancel, snooze,
  rescue, shutdown release) gives the slot back, because the count is of live attempts,
  not of a ledger a transition must remember to update (:data:`SLOT_STATES`).
- **Which jobs a claim takes (fairness).** The candidates in the queue's own claim order
  are ranked within their key (first, second, ... job of ``tenant-42``); the claim takes
  them by rank, then by the queue's order, so every key among the candidates gets its
  first job before any gets its second, and a key's candidates whose rank exceeds its
  free slots are not taken at all. Which candidates a claim is offered is the engine's
  (every available job in the in-memory model; a window of keys that rotates from claim
  to claim in a database, ADR 0029).
- **Jobs without a key** are not limited; each counts as a key of its own (rank one).
- **The window of keys a database claim offers** (:class:`KeyWindow`): the next keys with
  work in rotation order, walking past keys that have no free slot, so a key at its limit
  never takes the turn of a key with room: a key with work and a free slot is offered no
  later than the claim that follows the last claim before it became claimable, unless
  more keys with room come before it in the rotation than the claim takes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.partitioning import shard_for_key
from awa.domain.states import JobState

#: The longest concurrency key, in UTF-8 bytes: a key is a tenant or account name, and
#: it is compared and indexed in the claim's path.
MAX_CONCURRENCY_KEY_BYTES = 255

#: The largest ``max_running_per_key``: more than a fleet can run at once.
MAX_RUNNING_PER_KEY = 1_000_000

#: Where a job keeps its concurrency key: its metadata, which every engine and plane
#: already carries with the job (through retries, snoozes, rescues, the DLQ and the SQL
#: producer contract), under a reserved name a handler's metadata updates may not touch.
CONCURRENCY_KEY_METADATA = "awa:concurrency_key"

#: Queue storage: a keyed job's lane is a shard of its own key, at or above this base
#: (keyless lanes are negative, ordering-key shards below 64): ``KEYED_SHARD_BASE +
#: shard_for_key(key, KEYED_SHARD_SPACE)``, which ``awa.ordering_key_shard`` computes in
#: SQL the same way.
KEYED_SHARD_BASE = 1 << 30
KEYED_SHARD_SPACE = 1 << 30

#: The states in which an attempt holds its key's slot.
SLOT_STATES: frozenset[JobState] = frozenset({JobState.Running, JobState.WaitingExternal})

#: How many walks of the rotation one database claim makes at most to fill its window
#: with keys that have a free slot (:class:`KeyWindow`). Each walk after the first asks
#: for as many keys as the walks before found without room; a key without room holds at
#: least ``max_running_per_key`` live attempts, so such keys are bounded by the attempts
#: running, and the walks stop at this many so a fleet whose every key is full still
#: pays a bounded claim.
MAX_KEY_WALKS = 4

T = TypeVar("T")
K = TypeVar("K")


def validate_concurrency_key(value: Any, field: str = "concurrency_key") -> str | None:
    """A job's concurrency key: ``None`` (no key) or non-empty text of at most
    :data:`MAX_CONCURRENCY_KEY_BYTES` UTF-8 bytes without NUL."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationTypeError(
            field, f"must be a string or None, got {type(value).__name__}", value=value
        )
    if not value:
        raise ValidationError(field, "must not be empty (leave it out for no key)", value=value)
    if "\x00" in value:
        raise ValidationError(field, "must not contain a NUL character", value=value)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_CONCURRENCY_KEY_BYTES:
        raise ValidationError(
            field,
            f"must be at most {MAX_CONCURRENCY_KEY_BYTES} bytes of UTF-8, got {size}",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "must be valid Unicode (no lone surrogates)") from None
    return value


def validate_max_running_per_key(value: Any, field: str = "max_running_per_key") -> int | None:
    """A queue's per-key limit: ``None`` (no limit) or an integer from 1 to
    :data:`MAX_RUNNING_PER_KEY`."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(
            field, f"must be an integer or None, got {type(value).__name__}", value=value
        )
    if not 1 <= value <= MAX_RUNNING_PER_KEY:
        raise ValidationError(
            field, f"must be between 1 and {MAX_RUNNING_PER_KEY}, got {value}", value=value
        )
    return value


def concurrency_key_of(metadata: Mapping[str, Any] | None) -> str | None:
    """A job's concurrency key, from its metadata."""
    if not metadata:
        return None
    key = metadata.get(CONCURRENCY_KEY_METADATA)
    return key if isinstance(key, str) else None


def with_concurrency_key(metadata: Mapping[str, Any], key: str | None) -> dict[str, Any]:
    """``metadata`` carrying ``key`` (validated); ``None`` leaves it as it is."""
    out = dict(metadata)
    if key is not None:
        out[CONCURRENCY_KEY_METADATA] = validate_concurrency_key(key)
    return out


def validate_job_key(metadata: Mapping[str, Any], ordering_key: bytes | None) -> None:
    """A job's key as stored in its metadata: valid, and not beside an ordering key (on
    queue storage each decides the job's lane)."""
    if CONCURRENCY_KEY_METADATA not in metadata:
        return
    validate_concurrency_key(metadata[CONCURRENCY_KEY_METADATA])
    if metadata[CONCURRENCY_KEY_METADATA] is not None and ordering_key is not None:
        raise ValidationError(
            "concurrency_key", "cannot be combined with ordering_key (each places the job)"
        )


def refuse_key_update(updates: Mapping[str, Any] | None) -> None:
    """A handler's metadata updates may not change the key its attempt holds a slot of."""
    if updates and CONCURRENCY_KEY_METADATA in updates:
        raise ValidationError("updates", f"must not change {CONCURRENCY_KEY_METADATA!r}")


def keyed_shard(key: str) -> int:
    """Queue storage: the lane shard of a concurrency key."""
    return KEYED_SHARD_BASE + shard_for_key(key.encode("utf-8"), KEYED_SHARD_SPACE)


def held_back(running: int, waiting: int, limit: int | None) -> int:
    """How many of a key's ``waiting`` ready jobs its ``max_running_per_key`` holds back
    now, with ``running`` of its attempts holding slots: those beyond the key's free
    slots (none without a limit)."""
    if limit is None:
        return 0
    return max(0, waiting - max(0, limit - running))


def holds_slot(state: JobState) -> bool:
    """Whether an attempt in ``state`` holds its concurrency key's slot."""
    return state in SLOT_STATES


def running_by_key(live: Iterable[tuple[str | None, JobState]]) -> Counter[str]:
    """The slots held per key, from ``(concurrency_key, state)`` of a queue's jobs."""
    held: Counter[str] = Counter()
    for key, state in live:
        if key is not None and holds_slot(state):
            held[key] += 1
    return held


def admit(
    candidates: Sequence[T],
    *,
    key_of: Callable[[T], str | None],
    running: Mapping[str, int],
    max_running_per_key: int | None,
    limit: int,
    key_allowance: Mapping[str, int] | None = None,
) -> list[T]:
    """The candidates a claim takes, at most ``limit`` of them.

    ``candidates`` come in the queue's claim order (priority, aging, ``run_at``, insert
    order). Without a limit the first ``limit`` are taken, as with no key at all. With
    one, each keyed candidate gets its rank within its key (1 for its key's first); it is
    taken only when ``running[key] + rank <= max_running_per_key``, and the taken ones are
    ordered by ``(rank, position)``: round one takes every key's first job, round two
    their second, and so on. Keyless candidates rank one.

    ``key_allowance`` (a fleet-wide rate limit per key, :mod:`awa.domain.rate_limits`)
    caps each keyed candidate's rank too: a key absent from it admits nothing.
    """
    return admit_counted(
        candidates,
        key_of=key_of,
        running=running,
        max_running_per_key=max_running_per_key,
        limit=limit,
        key_allowance=key_allowance,
    ).taken


@attrs.frozen
class Admitted(Generic[T]):
    """What :func:`admit_counted` took, and how many candidates it held back because
    their key was at ``max_running_per_key`` (``concurrency_limited``) or its per-key
    rate limiter had no token (``rate_limited``)."""

    taken: list[T]
    concurrency_limited: int = 0
    rate_limited: int = 0


def admit_counted(
    candidates: Sequence[T],
    *,
    key_of: Callable[[T], str | None],
    running: Mapping[str, int],
    max_running_per_key: int | None,
    limit: int,
    key_allowance: Mapping[str, int] | None = None,
) -> Admitted[T]:
    """:func:`admit`, counting the candidates each per-key limit held back."""
    if limit <= 0:
        return Admitted([])
    if max_running_per_key is None and key_allowance is None:
        return Admitted(list(candidates[:limit]))
    seen: Counter[str] = Counter()
    ranked: list[tuple[int, int, T]] = []
    by_concurrency = by_rate = 0
    for position, candidate in enumerate(candidates):
        key = key_of(candidate)
        if key is None:
            ranked.append((1, position, candidate))
            continue
        seen[key] += 1
        rank = seen[key]
        if max_running_per_key is not None and running.get(key, 0) + rank > max_running_per_key:
            by_concurrency += 1
            continue
        if key_allowance is not None and rank > key_allowance.get(key, 0):
            by_rate += 1
            continue
        ranked.append((rank, position, candidate))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return Admitted([candidate for _, _, candidate in ranked[:limit]], by_concurrency, by_rate)


@attrs.define
class KeyWindow(Generic[K]):
    """The keys with work one database claim under a per-key limit offers candidates of
    (ADR 0029, "Fairness"), built by walks of the rotation: each walk continues after
    the last key walked (the first after the claimer's cursor), each key walked is
    locked and counted by the engine, and :meth:`add` keeps those with a free slot. The
    next walk asks for as many keys as are still missing, so keys at their limit do not
    take the window's places; the walks end when ``wanted`` keys have room, the rotation
    has no more keys, or after :data:`MAX_KEY_WALKS` walks. The claimer's cursor moves to
    the last key walked (:attr:`cursor`): a key passed over for want of room had its turn.
    """

    wanted: int
    walked: list[K] = attrs.field(factory=list)
    with_room: list[K] = attrs.field(factory=list)
    walks: int = 0
    exhausted: bool = False

    def keys_to_walk(self) -> int:
        """How many keys the next walk asks for; 0 when the window is complete."""
        if self.exhausted or self.walks >= MAX_KEY_WALKS:
            return 0
        return max(0, self.wanted - len(self.with_room))

    def add(self, walked: Sequence[K], asked: int, free: Callable[[K], int]) -> None:
        """One walk's keys, in rotation order (``asked`` were asked for: fewer means the
        rotation has no more); ``free(key)``: the key's free slots (0 or less: none)."""
        self.walks += 1
        self.walked.extend(walked)
        self.with_room.extend(key for key in walked if free(key) > 0)
        if len(walked) < asked:
            self.exhausted = True

    @property
    def cursor(self) -> K | None:
        """The last key walked, where the claimer's next claim starts after."""
        return self.walked[-1] if self.walked else None
