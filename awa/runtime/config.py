"""Parse and validate the arguments of ``start()`` into an immutable runtime configuration.

Errors are plain ``ValueError`` / ``TypeError`` whose message names the offending field,
as the published SDK does for queue-config dicts.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, TypedDict, Unpack

import attrs

from awa._version import __version__
from awa.domain.errors import ValidationError
from awa.domain.flow_control import validate_max_running_per_key
from awa.domain.keywords import check_keywords
from awa.domain.leadership import DEFAULT_LEASE_TTL, validate_lease_ttl
from awa.domain.policies import DEFAULT_CARRY_BATCH
from awa.domain.queue_options import QUEUE_CONFIG_KEYS, RETENTION_KEYS
from awa.domain.rate_limits import GlobalRateLimit, validate_global_rate_limit
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES, validate_stripe_count
from awa.domain.validation import (
    CLAIM_SLOT_COUNT,
    DEFAULT_SLOT_COUNTS,
    LEASE_SLOT_COUNT,
    QUEUE_SLOT_COUNT,
)

DEFAULT_INFERRED_WORKERS = 10
DEFAULT_DICT_MAX_WORKERS = DEFAULT_INFERRED_WORKERS
DEFAULT_CLAIM_BATCH_SIZE = 512
DEFAULT_DEADLINE = timedelta(minutes=5)
DEFAULT_AGING_INTERVAL = timedelta(seconds=60)

STORAGE_TRANSITION_ROLES = ("auto", "canonical_drain", "queue_storage_target")

_QUEUE_KEYS = QUEUE_CONFIG_KEYS
_RETENTION_KEYS = RETENTION_KEYS


@attrs.frozen
class RateLimit:
    """A token bucket: ``rate`` tokens per second, at most ``burst`` stored."""

    rate: float
    burst: int


@attrs.frozen
class QueueConfig:
    """One queue a runtime serves.

    Hard-reserved mode: ``max_workers`` is the queue's own permit pool. Weighted mode
    (``global_max_workers`` set): ``min_workers`` are guaranteed, the rest of the global
    pool is shared by ``weight``; ``max_workers`` there is an optional per-queue cap.
    """

    name: str
    max_workers: int | None = DEFAULT_INFERRED_WORKERS
    min_workers: int | None = None
    weight: int = 1
    rate_limit: RateLimit | None = None
    deadline: timedelta | None = DEFAULT_DEADLINE
    aging_interval: timedelta | None = DEFAULT_AGING_INTERVAL
    claimers: int = 1
    claim_batch_size: int = DEFAULT_CLAIM_BATCH_SIZE
    #: At most this many running (or waiting) jobs per concurrency key, fleet-wide.
    max_running_per_key: int | None = None
    #: Fleet-wide rate limits of the queue and of each of its concurrency keys (ADR 0029).
    global_rate_limit: GlobalRateLimit | None = None
    global_rate_limit_per_key: GlobalRateLimit | None = None


@attrs.frozen
class RuntimeConfig:
    """Everything the runtime needs besides its ports. Intervals are in seconds."""

    queues: tuple[QueueConfig, ...]
    global_max_workers: int | None = None
    poll_interval: float = 0.2
    heartbeat_interval: float = 30.0
    heartbeat_staleness: timedelta = timedelta(seconds=90)
    promote_interval: float = 0.25
    heartbeat_rescue_interval: float = 30.0
    deadline_rescue_interval: float = 30.0
    callback_rescue_interval: float = 30.0
    leader_election_interval: float = 10.0
    leader_lease_ttl: float = DEFAULT_LEASE_TTL
    cleanup_interval: float = 60.0
    completed_retention: timedelta = timedelta(hours=24)
    failed_retention: timedelta = timedelta(hours=72)
    dlq_retention: timedelta = timedelta(days=30)
    descriptor_retention: timedelta = timedelta(days=30)
    cleanup_batch_size: int = 1000
    promote_batch_size: int = 4096
    completion_batch_size: int = 512
    completion_flush_interval: float = 0.001
    snapshot_interval: float = 10.0
    sync_handler_threads: int | None = None
    version: str = __version__
    storage_transition_role: str = "auto"
    queue_storage_schema: str | None = None
    queue_storage_queue_stripe_count: int = DEFAULT_QUEUE_STRIPES
    queue_storage_queue_rotate_interval: float = 1.0
    queue_storage_lease_rotate_interval: float = 0.25
    #: The most unclaimed rows one step of the ring duty's prune moves out of the slot it
    #: reclaims (each step its own transaction, the lease renewed in between).
    queue_storage_carry_batch_size: int = DEFAULT_CARRY_BATCH

    @property
    def weighted(self) -> bool:
        return self.global_max_workers is not None

    @property
    def total_capacity(self) -> int:
        """Most handlers that can run at once across every queue."""
        if self.global_max_workers is not None:
            return self.global_max_workers
        return sum(q.max_workers or 0 for q in self.queues)

    def queue(self, name: str) -> QueueConfig:
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(name)


# --------------------------------------------------------------------------- helpers

NO_HANDLERS = "register at least one worker before starting the runtime"


def _int(field: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an integer, got {type(value).__name__}")
    if value < minimum:
        # awa-pg words the common bound as "> 0"; callers match on it.
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{field} must be {bound}, got {value}")
    return value


def _number(field: str, value: Any, *, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{field} must be a number, got {type(value).__name__}")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{field} must be finite, got {value!r}")
    if number < minimum or (strict and number == minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{field} must be {op} {minimum:g}, got {value!r}")
    return number


def _ms(field: str, value: Any, default_ms: float, *, strict: bool = True) -> float:
    """Milliseconds (``None`` = default) to seconds."""
    if value is None:
        return default_ms / 1000.0
    return _number(field, value, strict=strict) / 1000.0


#: Environment variables that set the completion batcher where ``start()`` does not (its
#: keywords win): the most completions one flush writes, and how long a completion waits
#: for others to join its flush.
COMPLETION_BATCH_SIZE_ENV = "AWA_COMPLETION_BATCH_SIZE"
COMPLETION_FLUSH_MS_ENV = "AWA_COMPLETION_FLUSH_MS"


def _keyword_or_env(field: str, value: Any, variable: str, *, whole: bool) -> tuple[str, Any]:
    """``(field, value)`` when the keyword was given, else ``(variable, parsed)`` from the
    environment when it is set, else ``(field, None)``. A value the environment holds
    that is not a number is refused with the variable's name."""
    if value is not None:
        return field, value
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return field, None
    try:
        return variable, int(raw) if whole else float(raw)
    except ValueError:
        kind = "an integer" if whole else "a number of milliseconds"
        raise ValueError(f"{variable} must be {kind}, got {raw!r}") from None


def _hours(field: str, value: Any, default: timedelta) -> timedelta:
    if value is None:
        return default
    return timedelta(hours=_number(field, value))


def _optional_ms_duration(field: str, value: Any, default: timedelta) -> timedelta | None:
    """A per-queue duration in ms where ``0`` disables the feature."""
    if value is None:
        return default
    ms = _number(field, value)
    return None if ms == 0 else timedelta(milliseconds=ms)


def _rate_limit(field: str, value: Any) -> RateLimit | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = (value.get("max_rate", value.get("rate")), value.get("burst"))
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or len(value) != 2:
        raise TypeError(f"{field} must be a (max_rate, burst) tuple, got {value!r}")
    rate = _number(f"{field}.max_rate", value[0], strict=True)
    burst = _int(f"{field}.burst", value[1])
    return RateLimit(rate=rate, burst=burst)


def _queue_name(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string, got {type(value).__name__}")
    if not value or len(value) > 200:
        raise ValueError(f"{field} must be 1..200 characters, got {value!r}")
    return value


def _parse_dict(raw: Mapping[str, Any], index: int, *, weighted: bool) -> QueueConfig:
    unknown = sorted(set(raw) - _QUEUE_KEYS)
    if unknown:
        raise ValueError(f"queues[{index}]: unknown queue config key(s): {', '.join(unknown)}")
    if "name" not in raw:
        raise ValueError(f"queues[{index}]: queue config dict requires 'name'")
    name = _queue_name(f"queues[{index}].name", raw["name"])
    where = f"queue {name!r}"
    max_raw, min_raw = raw.get("max_workers"), raw.get("min_workers")
    if max_raw is not None and min_raw is not None:
        raise ValueError(f"{where}: max_workers and min_workers are mutually exclusive")
    max_workers: int | None = None
    min_workers: int | None = None
    if weighted:
        min_workers = 0 if min_raw is None else _int(f"{where}: min_workers", min_raw, minimum=0)
        if max_raw is not None:
            max_workers = _int(f"{where}: max_workers", max_raw)
    else:
        if min_raw is not None:
            raise ValueError(f"{where}: min_workers requires global_max_workers (weighted mode)")
        max_workers = (
            DEFAULT_DICT_MAX_WORKERS if max_raw is None else _int(f"{where}: max_workers", max_raw)
        )
    weight_raw, claimers_raw = raw.get("weight"), raw.get("claimers")
    weight = 1 if weight_raw is None else _int(f"{where}: weight", weight_raw)
    claimers = 1 if claimers_raw is None else _int(f"{where}: claimers", claimers_raw)
    batch_raw = raw.get("claim_batch_size")
    batch = (
        DEFAULT_CLAIM_BATCH_SIZE
        if batch_raw is None
        else _int(f"{where}: claim_batch_size", batch_raw)
    )
    _refuse_queue_retention(where, raw.get("retention"))
    return QueueConfig(
        name=name,
        max_workers=max_workers,
        min_workers=min_workers,
        weight=weight,
        rate_limit=_rate_limit(f"{where}: rate_limit", raw.get("rate_limit")),
        deadline=_optional_ms_duration(
            f"{where}: deadline_duration_ms", raw.get("deadline_duration_ms"), DEFAULT_DEADLINE
        ),
        aging_interval=_optional_ms_duration(
            f"{where}: priority_aging_interval_ms",
            raw.get("priority_aging_interval_ms"),
            DEFAULT_AGING_INTERVAL,
        ),
        claimers=claimers,
        max_running_per_key=validate_max_running_per_key(
            raw.get("max_running_per_key"), f"{where}: max_running_per_key"
        ),
        claim_batch_size=batch,
        global_rate_limit=validate_global_rate_limit(
            raw.get("global_rate_limit"), f"{where}: global_rate_limit"
        ),
        global_rate_limit_per_key=validate_global_rate_limit(
            raw.get("global_rate_limit_per_key"), f"{where}: global_rate_limit_per_key"
        ),
    )


def _refuse_queue_retention(where: str, retention: Any) -> None:
    """A queue's ``retention`` overrides are refused rather than accepted and ignored:
    retention is applied by the maintenance leader, which may be a process that does not
    serve the queue, so only the runtime-wide ``start()`` keywords can be honoured
    (awa-pg accepts the key and ignores it). ``None`` or an empty dict asks nothing."""
    if retention is None:
        return
    if not isinstance(retention, Mapping):
        raise TypeError(f"{where}: retention must be a dict, got {type(retention).__name__}")
    bad = sorted(set(retention) - _RETENTION_KEYS)
    if bad:
        raise ValueError(f"{where}: unknown retention key(s): {', '.join(bad)}")
    asked = sorted(key for key, value in retention.items() if value is not None)
    if asked:
        hours = ", ".join(f"{key.removesuffix('_hours')}_retention_hours=..." for key in asked)
        raise ValueError(
            f"{where}: retention.{asked[0]} per queue is not supported (retention is "
            f"cluster-wide, applied by the maintenance leader); pass start({hours}) instead"
        )


def parse_queues(
    queues: Sequence[Any] | None,
    *,
    handler_queues: Collection[str],
    global_max_workers: int | None,
    only_listed_queues: bool = False,
) -> tuple[QueueConfig, ...]:
    """Validate the ``queues`` argument of ``start()`` against the registered handlers.

    Every handler queue must be listed unless ``only_listed_queues`` (a worker that
    serves a subset; the other handlers then do not run in it)."""
    if not handler_queues:
        raise ValidationError("queues", NO_HANDLERS)
    weighted = global_max_workers is not None
    parsed: list[QueueConfig] = []
    if queues is None:
        if weighted:
            raise ValueError(
                "weighted mode requires explicit queue configs (global_max_workers set but "
                "queues=None): pass a list of queue config dicts"
            )
        parsed = [QueueConfig(name=q) for q in sorted(set(handler_queues))]
    else:
        if isinstance(queues, str | bytes | Mapping) or not isinstance(queues, Sequence):
            raise TypeError(
                "queues must be a list of (name, max_workers) tuples or queue config dicts"
            )
        for index, item in enumerate(queues):
            if isinstance(item, Mapping):
                parsed.append(_parse_dict(item, index, weighted=weighted))
            elif isinstance(item, tuple | list):
                if weighted:
                    raise ValueError(
                        "tuple queue config is not supported with global_max_workers; use dict "
                        f"form with min_workers/weight (queues[{index}])"
                    )
                if len(item) != 2:
                    raise ValueError(
                        f"queues[{index}] must be a (name, max_workers) tuple, got {item!r}"
                    )
                name = _queue_name(f"queues[{index}].name", item[0])
                workers = _int(f"queue {name!r}: max_workers", item[1])
                parsed.append(QueueConfig(name=name, max_workers=workers))
            else:
                raise TypeError(
                    f"queues[{index}] must be a (name, max_workers) tuple or a dict, "
                    f"got {type(item).__name__}"
                )
    if not parsed:
        raise ValueError("queues must configure at least one queue")
    seen: set[str] = set()
    for q in parsed:
        if q.name in seen:
            raise ValidationError("queues", f"queue {q.name!r} configured more than once")
        seen.add(q.name)
    missing = sorted(set(handler_queues) - seen)
    if missing and not (only_listed_queues and queues is not None):
        raise ValueError(
            "every queue with a registered handler must be configured; missing: "
            + ", ".join(repr(m) for m in missing)
        )
    if global_max_workers is not None:
        floor = sum(q.min_workers or 0 for q in parsed)
        if floor > global_max_workers:
            raise ValueError(
                f"sum of min_workers ({floor}) exceeds global_max_workers ({global_max_workers})"
            )
    return tuple(parsed)


# start() keywords awa-pg accepts that this engine has no use for, and why.
NO_EFFECT = {
    "queue_storage_claim_rotate_interval_ms": (
        "claims rotate together with their queue slots, so there is no separate interval"
    ),
    "terminal_count_rollup_interval_ms": (
        "terminal counts are kept exact as each job finishes, so there is nothing to roll up"
    ),
}


def _warn_no_effect(keyword: str) -> None:
    # One warning per keyword and call site: the default filter shows it once.
    warnings.warn(f"{keyword} has no effect: {NO_EFFECT[keyword]}", UserWarning, stacklevel=4)


def _refuse_other_ring_sizes(counts: dict[str, int]) -> None:
    """The runtime works on the ring layout queue storage was installed with, so start()
    cannot change it: any other size is refused rather than ignored."""
    for name, value in counts.items():
        default = DEFAULT_SLOT_COUNTS[name]
        if value != default:
            raise ValidationError(
                f"queue_storage_{name}",
                f"ring sizes are set when queue storage is installed "
                f"(install_queue_storage({name}=...) or `awa storage "
                f"prepare-queue-storage-schema`); start() runs on the installed layout, so "
                f"leave it at {default}, got {value}",
                value=value,
            )


class StartOptions(TypedDict, total=False):
    """The keywords of ``AsyncClient.start()`` that configure the runtime, declared once
    (ADR 0027); ``start()`` adds its own (``health_addr``, ``listen_database_url``).
    Every key may be left out or ``None``: :func:`parse_start_args` applies the default."""

    poll_interval_ms: int | None
    global_max_workers: int | None
    completed_retention_hours: float | None
    failed_retention_hours: float | None
    descriptor_retention_days: float | None
    cleanup_batch_size: int | None
    leader_election_interval_ms: int | None
    leader_lease_ttl_ms: int | None
    heartbeat_interval_ms: int | None
    promote_interval_ms: int | None
    heartbeat_rescue_interval_ms: int | None
    heartbeat_staleness_ms: int | None
    deadline_rescue_interval_ms: int | None
    callback_rescue_interval_ms: int | None
    terminal_count_rollup_interval_ms: int | None
    queue_storage_schema: str | None
    queue_storage_queue_slot_count: int
    queue_storage_lease_slot_count: int
    queue_storage_claim_slot_count: int
    queue_storage_queue_stripe_count: int
    queue_storage_queue_rotate_interval_ms: int | None
    queue_storage_lease_rotate_interval_ms: int | None
    queue_storage_claim_rotate_interval_ms: int | None
    storage_transition_role: Literal["auto", "canonical_drain", "queue_storage_target"] | None
    only_listed_queues: bool
    completion_batch_size: int | None
    completion_flush_ms: float | None


class RuntimeOptions(StartOptions, total=False):
    """:class:`StartOptions` plus runtime tuning knobs ``start()`` does not expose."""

    cleanup_interval_ms: int | None
    dlq_retention_hours: float | None
    snapshot_interval_ms: int | None
    sync_handler_threads: int | None
    queue_storage_carry_batch_size: int | None
    version: str


def parse_start_args(
    queues: Sequence[Any] | None = None,
    *,
    handler_queues: Collection[str],
    **options: Unpack[RuntimeOptions],
) -> RuntimeConfig:
    """Build a :class:`RuntimeConfig` from ``start()`` keywords (absent or ``None`` =
    default). ``handler_queues`` are the queues of the registered handlers. A keyword
    :class:`RuntimeOptions` does not declare raises ``TypeError``."""
    check_keywords("parse_start_args", options, RuntimeOptions)
    global_max_workers = options.get("global_max_workers")
    heartbeat_staleness_ms = options.get("heartbeat_staleness_ms")
    descriptor_retention_days = options.get("descriptor_retention_days")
    cleanup_batch_size = options.get("cleanup_batch_size")
    carry_batch_size = options.get("queue_storage_carry_batch_size")
    sync_handler_threads = options.get("sync_handler_threads")
    storage_transition_role = options.get("storage_transition_role")
    queue_storage_schema = options.get("queue_storage_schema")
    if global_max_workers is not None:
        global_max_workers = _int("global_max_workers", global_max_workers)
    parsed = parse_queues(
        queues,
        handler_queues=handler_queues,
        global_max_workers=global_max_workers,
        only_listed_queues=options.get("only_listed_queues", False),
    )
    role = "auto" if storage_transition_role is None else storage_transition_role
    if role not in STORAGE_TRANSITION_ROLES:
        *head, last = (repr(r) for r in STORAGE_TRANSITION_ROLES)
        raise ValueError(
            f"storage_transition_role must be one of {', '.join(head)}, or {last} "
            f"(got {storage_transition_role!r})"
        )
    if queue_storage_schema is not None and not isinstance(queue_storage_schema, str):
        raise TypeError("queue_storage_schema must be a string")
    _refuse_other_ring_sizes(
        {
            "queue_slot_count": _int(
                "queue_storage_queue_slot_count",
                options.get("queue_storage_queue_slot_count", QUEUE_SLOT_COUNT),
            ),
            "lease_slot_count": _int(
                "queue_storage_lease_slot_count",
                options.get("queue_storage_lease_slot_count", LEASE_SLOT_COUNT),
            ),
            "claim_slot_count": _int(
                "queue_storage_claim_slot_count",
                options.get("queue_storage_claim_slot_count", CLAIM_SLOT_COUNT),
            ),
        }
    )
    for keyword in NO_EFFECT:
        value = options.get(keyword)
        if value is not None:
            _warn_no_effect(keyword)
            # Accepted for compatibility, so still checked: a malformed value is an error.
            _number(keyword, value, strict=True)
    heartbeat_interval = _ms("heartbeat_interval_ms", options.get("heartbeat_interval_ms"), 30_000)
    staleness_ms = (
        90_000.0
        if heartbeat_staleness_ms is None
        else _number("heartbeat_staleness_ms", heartbeat_staleness_ms, strict=True)
    )
    batch_field, batch_size = _keyword_or_env(
        "completion_batch_size",
        options.get("completion_batch_size"),
        COMPLETION_BATCH_SIZE_ENV,
        whole=True,
    )
    flush_field, flush_ms = _keyword_or_env(
        "completion_flush_ms",
        options.get("completion_flush_ms"),
        COMPLETION_FLUSH_MS_ENV,
        whole=False,
    )
    stripes = validate_stripe_count(
        options.get("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
    )
    limited = [q.name for q in parsed if q.max_running_per_key is not None]
    if limited and stripes > 1:
        raise ValueError(
            f"queue {limited[0]!r}: max_running_per_key needs queue_storage_queue_stripe_count=1 "
            f"(got {stripes}): a key's jobs would be spread over the stripes"
        )
    rated = [
        (q.name, "global_rate_limit" if q.global_rate_limit else "global_rate_limit_per_key")
        for q in parsed
        if q.global_rate_limit is not None or q.global_rate_limit_per_key is not None
    ]
    if rated and stripes > 1:
        raise ValueError(
            f"queue {rated[0][0]!r}: {rated[0][1]} needs queue_storage_queue_stripe_count=1 "
            f"(got {stripes}): a striped claim does not consult the fleet-wide limiter"
        )
    return RuntimeConfig(
        queues=parsed,
        global_max_workers=global_max_workers,
        poll_interval=_ms("poll_interval_ms", options.get("poll_interval_ms"), 200),
        heartbeat_interval=heartbeat_interval,
        heartbeat_staleness=timedelta(milliseconds=staleness_ms),
        promote_interval=_ms("promote_interval_ms", options.get("promote_interval_ms"), 250),
        heartbeat_rescue_interval=_ms(
            "heartbeat_rescue_interval_ms", options.get("heartbeat_rescue_interval_ms"), 30_000
        ),
        deadline_rescue_interval=_ms(
            "deadline_rescue_interval_ms", options.get("deadline_rescue_interval_ms"), 30_000
        ),
        callback_rescue_interval=_ms(
            "callback_rescue_interval_ms", options.get("callback_rescue_interval_ms"), 30_000
        ),
        leader_election_interval=_ms(
            "leader_election_interval_ms", options.get("leader_election_interval_ms"), 10_000
        ),
        leader_lease_ttl=validate_lease_ttl(
            _ms(
                "leader_lease_ttl_ms",
                options.get("leader_lease_ttl_ms"),
                int(DEFAULT_LEASE_TTL * 1000),
            )
        ),
        cleanup_interval=_ms("cleanup_interval_ms", options.get("cleanup_interval_ms"), 60_000),
        completed_retention=_hours(
            "completed_retention_hours",
            options.get("completed_retention_hours"),
            timedelta(hours=24),
        ),
        failed_retention=_hours(
            "failed_retention_hours", options.get("failed_retention_hours"), timedelta(hours=72)
        ),
        dlq_retention=_hours(
            "dlq_retention_hours", options.get("dlq_retention_hours"), timedelta(days=30)
        ),
        descriptor_retention=(
            timedelta(days=30)
            if descriptor_retention_days is None
            else timedelta(days=_number("descriptor_retention_days", descriptor_retention_days))
        ),
        cleanup_batch_size=(
            1000 if cleanup_batch_size is None else _int("cleanup_batch_size", cleanup_batch_size)
        ),
        completion_batch_size=(512 if batch_size is None else _int(batch_field, batch_size)),
        completion_flush_interval=_ms(flush_field, flush_ms, 1, strict=False),
        snapshot_interval=_ms("snapshot_interval_ms", options.get("snapshot_interval_ms"), 10_000),
        sync_handler_threads=(
            None
            if sync_handler_threads is None
            else _int("sync_handler_threads", sync_handler_threads)
        ),
        version=options.get("version", __version__),
        storage_transition_role=role,
        queue_storage_schema=queue_storage_schema,
        queue_storage_queue_stripe_count=stripes,
        queue_storage_queue_rotate_interval=_ms(
            "queue_storage_queue_rotate_interval_ms",
            options.get("queue_storage_queue_rotate_interval_ms"),
            1000,
        ),
        queue_storage_lease_rotate_interval=_ms(
            "queue_storage_lease_rotate_interval_ms",
            options.get("queue_storage_lease_rotate_interval_ms"),
            250,
        ),
        queue_storage_carry_batch_size=(
            DEFAULT_CARRY_BATCH
            if carry_batch_size is None
            else _int("queue_storage_carry_batch_size", carry_batch_size)
        ),
    )
