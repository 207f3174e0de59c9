"""OpenTelemetry metrics, recorded through ``opentelemetry-api`` only.

Instruments come from the global meter provider's ``awa`` meter, so whatever provider the
application installs (or :func:`awa.init_telemetry`) receives them. Without
``opentelemetry-api`` :func:`instruments` returns ``None`` and callers record nothing.

Counters on the per-job path are summed in plain integers and reported through
observable counters when a reader collects: an ``add()`` through the SDK costs
microseconds per call, a dict increment a fraction of one. The two per-job histograms
(``awa.job.duration``, ``awa.job.wait_duration``) are sampled systematically once a
process records more than ``HISTOGRAM_BUDGET`` observations a second: every k-th job is
recorded, k following the last second's rate. Quantiles stay unbiased; counts and rates
come from the counters, which are exact.

``METRICS`` names every instrument with its type, unit and description: the dashboard
and the alert rules under ``deploy/`` are checked against it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from awa.domain.descriptors import Catalog, Descriptor
from awa.domain.job import JobRecord, JobSpec
from awa.runtime.outcome_log import TERMINAL_FAILURES

try:
    from opentelemetry import metrics as otel_metrics
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    otel_metrics = None  # type: ignore[assignment]

METER_NAME = "awa"

ATTR_QUEUE = "awa.job.queue"
ATTR_KIND = "awa.job.kind"
ATTR_SHARD = "awa.enqueue.shard"
ATTR_TERMINAL = "awa.job.terminal"
ATTR_REASON = "awa.rescue.reason"
ATTR_STATE = "awa.job.state"
ATTR_DLQ_REASON = "awa.dlq.reason"
#: ``awa.storage.transition_ready``: the transition step (``enter_mixed_transition``,
#: ``finalize``).
ATTR_STORAGE_ACTION = "awa.storage.action"
#: ``awa.storage.live_runtime_capability``: what the counted runtimes can execute.
ATTR_STORAGE_CAPABILITY = "awa.storage.capability"
ATTR_STORAGE_STATE = "awa.storage.state"
ATTR_STORAGE_CURRENT = "awa.storage.current_engine"
ATTR_STORAGE_ACTIVE = "awa.storage.active_engine"
ATTR_STORAGE_PREPARED = "awa.storage.prepared_engine"
#: Descriptor fields on the info gauges: ``awa.queue.<field>`` / ``awa.job_kind.<field>``.
DESCRIPTOR_FIELDS = ("display_name", "description", "owner", "docs_url", "tags")
#: Every attribute awa puts on a metric (Prometheus turns the dots into underscores).
ATTRIBUTES = (
    ATTR_QUEUE,
    ATTR_KIND,
    ATTR_SHARD,
    ATTR_TERMINAL,
    ATTR_REASON,
    ATTR_STATE,
    ATTR_DLQ_REASON,
    ATTR_STORAGE_ACTION,
    ATTR_STORAGE_CAPABILITY,
    ATTR_STORAGE_STATE,
    ATTR_STORAGE_CURRENT,
    ATTR_STORAGE_ACTIVE,
    ATTR_STORAGE_PREPARED,
    *(f"awa.{catalog}.{field}" for catalog in ("queue", "job_kind") for field in DESCRIPTOR_FIELDS),
)

COUNTER = "counter"
HISTOGRAM = "histogram"
GAUGE = "gauge"
UPDOWN = "updown"

#: name -> (instrument type, unit, description)
METRICS: dict[str, tuple[str, str, str]] = {
    "awa.job.inserted": (COUNTER, "{job}", "Number of jobs inserted"),
    "awa.job.claimed": (COUNTER, "{job}", "Number of jobs claimed for execution"),
    "awa.job.completed": (COUNTER, "{job}", "Number of jobs completed successfully"),
    "awa.job.failed": (COUNTER, "{job}", "Number of jobs that failed terminally"),
    "awa.job.retried": (COUNTER, "{job}", "Number of jobs marked retryable"),
    "awa.job.cancelled": (COUNTER, "{job}", "Number of jobs cancelled by their handler"),
    "awa.job.snoozed": (COUNTER, "{job}", "Number of jobs snoozed by their handler"),
    "awa.job.waiting_external": (COUNTER, "{job}", "Number of jobs parked for a callback"),
    "awa.job.duration": (HISTOGRAM, "s", "Job execution duration"),
    "awa.job.wait_duration": (HISTOGRAM, "s", "Time from a job becoming due to its claim"),
    "awa.job.in_flight": (UPDOWN, "{job}", "Current number of in-flight jobs"),
    "awa.job.dlq_moved": (COUNTER, "{job}", "Number of jobs moved into the DLQ"),
    "awa.job.dlq_retried": (COUNTER, "{job}", "Number of jobs retried out of the DLQ"),
    "awa.job.rate_limited": (
        COUNTER,
        "{job}",
        "Jobs a claim had room for but left waiting: a fleet-wide rate limit had no token",
    ),
    "awa.job.concurrency_limited": (
        COUNTER,
        "{job}",
        "Jobs a claim left waiting because their concurrency key was at max_running_per_key",
    ),
    "awa.job.dlq_purged": (COUNTER, "{job}", "Number of DLQ entries deleted"),
    "awa.job.dlq_depth": (GAUGE, "{job}", "Current DLQ depth per queue"),
    "awa.dispatch.claim_batches": (COUNTER, "{batch}", "Number of claim queries executed"),
    "awa.dispatch.claim_batch_size": (HISTOGRAM, "{job}", "Jobs returned per claim"),
    "awa.dispatch.claim_duration": (HISTOGRAM, "s", "Claim query duration"),
    "awa.dispatch.empty_claim": (COUNTER, "{wake}", "Claims that found no job"),
    "awa.dispatch.unused_permits": (
        COUNTER,
        "{permit}",
        "Permits reserved for a claim and given back unused",
    ),
    "awa.dispatch.claims_ahead": (
        COUNTER,
        "{batch}",
        "Claims sent while another of the queue's was in flight (ADR 0037)",
    ),
    "awa.dispatch.claims_on_wake": (
        COUNTER,
        "{batch}",
        "Claims sent at a notification that arrived while the queue's claims were in flight",
    ),
    "awa.dispatch.rate_limited": (
        COUNTER,
        "{wake}",
        "Claim rounds skipped because the rate limit had no token",
    ),
    "awa.completion.flushes": (COUNTER, "{batch}", "Number of completion batch flushes"),
    "awa.completion.flush_batch_size": (HISTOGRAM, "{job}", "Completions per flush"),
    "awa.completion.flush_duration": (HISTOGRAM, "s", "Completion flush duration"),
    "awa.heartbeat.batches": (COUNTER, "{batch}", "Number of heartbeat batches sent"),
    "awa.wakeups.polling_fallbacks": (
        COUNTER,
        "{runtime}",
        "Runtimes whose notifications cannot arrive, waking by polling instead",
    ),
    "awa.maintenance.promote_batches": (COUNTER, "{batch}", "Number of promotion batches"),
    "awa.maintenance.promote_batch_size": (HISTOGRAM, "{job}", "Jobs promoted per batch"),
    "awa.maintenance.promote_duration": (HISTOGRAM, "s", "Promotion batch duration"),
    "awa.maintenance.rescues": (COUNTER, "{job}", "Number of jobs rescued by maintenance"),
    "awa.queue.depth": (GAUGE, "{job}", "Jobs per queue and state (cheap, may over-count)"),
    "awa.queue.lag": (GAUGE, "s", "Age of the oldest available job per queue"),
    "awa.queue.info": (
        GAUGE,
        "{queue}",
        "Declared queue descriptors (always 1; a label-join target)",
    ),
    "awa.job_kind.info": (
        GAUGE,
        "{kind}",
        "Declared job-kind descriptors (always 1; a label-join target)",
    ),
    "awa.storage.state": (
        GAUGE,
        "{state}",
        "Storage transition state and engines (always 1; the attributes carry them)",
    ),
    "awa.storage.transition_ready": (
        GAUGE,
        "{state}",
        "Whether a storage transition step would pass its gates now (1) or not (0)",
    ),
    "awa.storage.canonical_live_backlog": (
        GAUGE,
        "{job}",
        "Canonical jobs not yet terminal while a transition is prepared or mixed",
    ),
    "awa.storage.live_runtime_capability": (
        GAUGE,
        "{runtime}",
        "Live runtimes by the storage they can execute",
    ),
}

_COUNTER_OUTCOMES = {
    "completed": "awa.job.completed",
    "failed": "awa.job.failed",
    "exhausted": "awa.job.failed",
    "unknown_kind": "awa.job.failed",
    "retried": "awa.job.retried",
    "cancelled": "awa.job.cancelled",
    "snoozed": "awa.job.snoozed",
    "waiting_external": "awa.job.waiting_external",
}

Key = tuple[tuple[str, Any], ...]

#: Per-job histogram observations per second and process before sampling starts.
HISTOGRAM_BUDGET = 200

# Histogram buckets suggested to the SDK (its defaults suit milliseconds, not seconds).
_SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]
_COUNT_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]


#: Samples taken between two looks at the clock (the stride is re-derived at each look).
_SAMPLES_PER_CHECK = HISTOGRAM_BUDGET // 4


class _Sampler:
    """Systematic sampling: ``take()`` is true for every ``stride``-th call. The stride is
    re-derived from the call rate every ``_SAMPLES_PER_CHECK`` samples taken, so about
    ``HISTOGRAM_BUDGET`` calls a second pass, and a burst after a quiet spell (the start
    of a drain) passes at most ``_SAMPLES_PER_CHECK`` calls before the stride catches up."""

    __slots__ = ("_calls", "_stride", "_taken", "_window_calls", "_window_start")

    def __init__(self) -> None:
        self._calls = 0
        self._stride = 1
        self._taken = 0
        self._window_calls = 0
        self._window_start = time.monotonic()

    def take(self) -> bool:
        self._calls += 1
        if self._calls % self._stride:
            return False
        self._taken += 1
        if self._taken >= _SAMPLES_PER_CHECK:
            now = time.monotonic()
            elapsed = max(now - self._window_start, 1e-6)
            rate = (self._calls - self._window_calls) / elapsed
            self._stride = max(1, int(rate // HISTOGRAM_BUDGET))
            self._window_calls, self._window_start, self._taken = self._calls, now, 0
        return True


class Instruments:
    """The ``awa`` instruments of one meter.

    ``count()`` is safe from any thread. Gauges and in-flight counts are read from
    sources registered with :meth:`add_gauge_source` when a reader collects."""

    def __init__(self, meter: Any) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[Key, int]] = {}
        self._gauge_sources: dict[str, list[Callable[[], Iterable[tuple[float, Key]]]]] = {}
        self.histograms: dict[str, Any] = {}
        self._duration_sampler = _Sampler()
        self._wait_sampler = _Sampler()
        for name, (kind, unit, description) in METRICS.items():
            if kind == COUNTER:
                self._counts[name] = {}
                meter.create_observable_counter(
                    name,
                    callbacks=[self._counter_callback(name)],
                    unit=unit,
                    description=description,
                )
            elif kind == HISTOGRAM:
                self.histograms[name] = meter.create_histogram(
                    name,
                    unit=unit,
                    description=description,
                    explicit_bucket_boundaries_advisory=(
                        _SECONDS_BUCKETS if unit == "s" else _COUNT_BUCKETS
                    ),
                )
            else:
                self._gauge_sources[name] = []
                create = (
                    meter.create_observable_gauge
                    if kind == GAUGE
                    else meter.create_observable_up_down_counter
                )
                create(
                    name,
                    callbacks=[self._gauge_callback(name)],
                    unit=unit,
                    description=description,
                )

    # ------------------------------------------------------------------ recording
    def count(self, name: str, key: Key, amount: int = 1) -> None:
        """Add ``amount`` to counter ``name`` for the attribute set ``key``."""
        counts = self._counts[name]
        with self._lock:
            counts[key] = counts.get(key, 0) + amount

    def record(self, name: str, value: float, attributes: dict[str, Any]) -> None:
        self.histograms[name].record(value, attributes)

    def job_outcome(self, outcome: str, kind: str, queue: str, duration: float) -> None:
        """One attempt ended with ``outcome`` (an ``outcome_log`` name)."""
        name = _COUNTER_OUTCOMES.get(outcome)
        if name is not None:
            key: Key = ((ATTR_QUEUE, queue), (ATTR_KIND, kind))
            if outcome in TERMINAL_FAILURES:
                key = (*key, (ATTR_TERMINAL, True))
            self.count(name, key)
        if self._duration_sampler.take():
            self.histograms["awa.job.duration"].record(
                duration, {ATTR_QUEUE: queue, ATTR_KIND: kind}
            )

    def inserted(self, jobs: Iterable[tuple[str, str]]) -> None:
        """Jobs were inserted: one ``(queue, kind)`` pair per job."""
        self.add_many("awa.job.inserted", Counter(jobs))

    def add_many(self, name: str, per_pair: Mapping[tuple[str, str], int]) -> None:
        """Add to counter ``name`` per ``(queue, kind)`` pair."""
        counts = self._counts[name]
        with self._lock:
            for (queue, kind), amount in per_pair.items():
                key: Key = ((ATTR_QUEUE, queue), (ATTR_KIND, kind))
                counts[key] = counts.get(key, 0) + amount

    def dlq(
        self,
        name: str,
        amount: int,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: str | None = None,
    ) -> None:
        """``amount`` jobs moved into (``awa.job.dlq_moved``, with its ``reason``), out of
        (``awa.job.dlq_retried``) or were deleted from (``awa.job.dlq_purged``) the DLQ;
        ``queue`` / ``kind`` when the operation names them."""
        if amount <= 0:
            return
        pairs = ((ATTR_QUEUE, queue), (ATTR_KIND, kind), (ATTR_DLQ_REASON, reason))
        self.count(name, tuple((k, v) for k, v in pairs if v is not None), amount)

    def claimed(
        self,
        queue: str,
        jobs: Iterable[tuple[str, int | None]],
        asked: int,
        seconds: float,
        due: Sequence[datetime],
        now: datetime,
    ) -> None:
        """One claim for up to ``asked`` jobs took ``seconds`` and returned ``jobs``
        (each its kind and, on queue storage, its lane's enqueue shard) that had been due
        since ``due``."""
        key: Key = ((ATTR_QUEUE, queue),)
        attributes = {ATTR_QUEUE: queue}
        self.count("awa.dispatch.claim_batches", key)
        self.histograms["awa.dispatch.claim_duration"].record(seconds, attributes)
        got = 0
        claimed = self._counts["awa.job.claimed"]
        with self._lock:
            for kind, shard in jobs:
                got += 1
                kind_key: Key = (
                    ((ATTR_QUEUE, queue), (ATTR_KIND, kind))
                    if shard is None
                    else ((ATTR_QUEUE, queue), (ATTR_KIND, kind), (ATTR_SHARD, shard))
                )
                claimed[kind_key] = claimed.get(kind_key, 0) + 1
        if got == 0:
            self.count("awa.dispatch.empty_claim", key)
            return
        self.histograms["awa.dispatch.claim_batch_size"].record(got, attributes)
        if asked > got:
            self.count("awa.dispatch.unused_permits", key, asked - got)
        wait = self.histograms["awa.job.wait_duration"]
        sampler = self._wait_sampler
        for run_at in due:
            if sampler.take():
                wait.record(max(0.0, (now - run_at).total_seconds()), attributes)

    def flushed(self, size: int, seconds: float) -> None:
        """A completion flush of ``size`` attempts took ``seconds``."""
        self.count("awa.completion.flushes", ())
        self.histograms["awa.completion.flush_batch_size"].record(size, {})
        self.histograms["awa.completion.flush_duration"].record(seconds, {})

    def promoted(self, count: int, seconds: float) -> None:
        self.count("awa.maintenance.promote_batches", ())
        self.histograms["awa.maintenance.promote_batch_size"].record(count, {})
        self.histograms["awa.maintenance.promote_duration"].record(seconds, {})

    def gauge_names(self) -> list[str]:
        """The gauges (and up-down counters) read from sources, by name."""
        return list(self._gauge_sources)

    def add_gauge_sources(
        self, sources: Mapping[str, Callable[[], Iterable[tuple[float, Key]]]]
    ) -> Callable[[], None]:
        """:meth:`add_gauge_source` for several gauges; the function removes them all."""
        removers = [self.add_gauge_source(name, source) for name, source in sources.items()]

        def remove() -> None:
            for remover in removers:
                remover()

        return remove

    def add_gauge_source(
        self, name: str, source: Callable[[], Iterable[tuple[float, Key]]]
    ) -> Callable[[], None]:
        """Report ``source()``'s ``(value, attributes)`` pairs as gauge ``name``; returns
        a function that removes the source again."""
        sources = self._gauge_sources[name]
        sources.append(source)

        def remove() -> None:
            if source in sources:
                sources.remove(source)

        return remove

    def counter_value(self, name: str, attributes: dict[str, Any] | None = None) -> int:
        """The running total of counter ``name`` over the attribute sets that include
        ``attributes`` (for diagnostics)."""
        attributes = attributes or {}
        wanted = set(attributes.items())
        with self._lock:
            return sum(value for key, value in self._counts[name].items() if wanted <= set(key))

    # ------------------------------------------------------------------ callbacks
    def _counter_callback(self, name: str) -> Callable[[Any], Iterable[Any]]:
        counts = self._counts[name]

        def observe(options: Any) -> Iterable[Any]:
            assert otel_metrics is not None
            with self._lock:
                snapshot = list(counts.items())
            return [otel_metrics.Observation(value, dict(key)) for key, value in snapshot]

        return observe

    def _gauge_callback(self, name: str) -> Callable[[Any], Iterable[Any]]:
        sources = self._gauge_sources[name]

        def observe(options: Any) -> Iterable[Any]:
            assert otel_metrics is not None
            observations = []
            for source in list(sources):
                for value, key in source():
                    observations.append(otel_metrics.Observation(value, dict(key)))
            return observations

        return observe


_instruments: Instruments | None = None
_init_lock = threading.Lock()


def instruments() -> Instruments | None:
    """The process's instruments, created on first use; ``None`` without the API."""
    global _instruments
    if otel_metrics is None:
        return None
    if _instruments is None:
        with _init_lock:
            if _instruments is None:
                _instruments = Instruments(otel_metrics.get_meter(METER_NAME))
    return _instruments


def count_inserted(specs: Iterable[JobSpec]) -> None:
    """``awa.job.inserted``: the jobs of ``specs`` were inserted (queue as given, so a
    striped queue counts under its logical name, as its claims do)."""
    found = instruments()
    if found is not None:
        found.inserted((spec.queue, spec.kind) for spec in specs)


def count_inserted_of(specs: Sequence[JobSpec], records: Sequence[JobRecord]) -> None:
    """``awa.job.inserted`` for a batch that skipped the specs whose unique key was held:
    ``records`` are the jobs it did insert. Only specs with a unique key can be skipped,
    so they are matched to the records by key."""
    if instruments() is None:
        return
    if len(records) == len(specs):
        count_inserted(specs)
        return
    held = Counter(r.unique_key for r in records if r.unique_key is not None)
    inserted = []
    for spec in specs:
        if spec.unique_key is None:
            inserted.append(spec)
        elif held[spec.unique_key] > 0:
            held[spec.unique_key] -= 1
            inserted.append(spec)
    count_inserted(inserted)


def count_inserted_copy(specs: Sequence[JobSpec], inserted: int) -> None:
    """``awa.job.inserted`` for a COPY batch that reports only how many jobs it inserted.
    When it skipped some (held unique keys), the specs without a unique key were all
    inserted and the rest of the count goes to the unique specs' queue and kind, each
    attribute kept only when those specs share it."""
    found = instruments()
    if found is None:
        return
    if inserted >= len(specs):
        count_inserted(specs)
        return
    free = [spec for spec in specs if spec.unique_key is None]
    count_inserted(free)
    keyed = [spec for spec in specs if spec.unique_key is not None]
    queues = {spec.queue for spec in keyed}
    kinds = {spec.kind for spec in keyed}
    pairs = ((ATTR_QUEUE, queues), (ATTR_KIND, kinds))
    key: Key = tuple((name, next(iter(values))) for name, values in pairs if len(values) == 1)
    found.count("awa.job.inserted", key, inserted - len(free))


def descriptor_info(catalog: Catalog, name: str, descriptor: Descriptor) -> Key:
    """The attributes of one ``awa.queue.info`` / ``awa.job_kind.info`` point: the queue
    (or kind) and the descriptor fields that are set (tags joined by commas)."""
    key: list[tuple[str, Any]] = [(ATTR_QUEUE if catalog == "queue" else ATTR_KIND, name)]
    for field in DESCRIPTOR_FIELDS:
        value = getattr(descriptor, field)
        if field == "tags":
            value = ",".join(value) if value else None
        if value is not None:
            key.append((f"awa.{catalog}.{field}", value))
    return tuple(key)
