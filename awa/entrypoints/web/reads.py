"""Operator reads behind the REST API and the pages, shaped as JSON-ready dicts.

Every read the pages poll (counts, queues, kinds, runtimes, storage, timeseries, job and
DLQ pages, one job) goes through the :class:`~awa.entrypoints.web.cache.ReadCache`, so it
is at most one cache TTL old; a mutation through this server drops the cache.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from awa.domain.admin_views import (
    KindCounts,
    QueueSample,
    QueueStateBucket,
    first_minute,
    listed_kinds,
    listed_queues,
    minute_of,
)
from awa.domain.batch_ops import parse_operation_id
from awa.domain.callbacks import CallbackExpressions
from awa.domain.descriptors import handler_missing
from awa.domain.errors import AwaError, JobNotFound, ValidationError
from awa.domain.job import DlqEntry, JobRecord, QueueCounts
from awa.domain.runtimes import is_live
from awa.domain.states import JobState
from awa.entrypoints.client_admin import held_back_json, job_dict, job_document
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.client_cron import next_fire_at
from awa.entrypoints.held_back import held_back_of, rate_limited_by_queue
from awa.entrypoints.job import rfc3339
from awa.entrypoints.job_graph import batch_json, job_relations, queue_keys, workflow_graph
from awa.entrypoints.web.cache import ReadCache
from awa.entrypoints.web.errors import bad_request, not_found
from awa.ports.runtime_registry import QueueSnapshot, RuntimeSnapshot
from awa.ports.storage import DlqFilter, JobFilter

MAX_LIMIT = 500
MAX_TIMESERIES_MINUTES = 24 * 60


def _now() -> datetime:
    return datetime.now(UTC)


#: The callback expression columns of a job row, by the CEL field they hold.
CALLBACK_COLUMNS = {
    "filter": "callback_filter",
    "on_complete": "callback_on_complete",
    "on_fail": "callback_on_fail",
    "transform": "callback_transform",
}


def job_json(
    record: JobRecord,
    descriptors: dict[str, Any] | None = None,
    expressions: CallbackExpressions | None = None,
) -> dict[str, Any]:
    """A job row: every column (the callback's CEL expressions among them) plus
    ``original_priority`` and, given the catalogs, the queue's and kind's descriptors."""
    row = job_dict(record)
    for field, column in CALLBACK_COLUMNS.items():
        row[column] = None if expressions is None else getattr(expressions, field)
    row["original_priority"] = record.metadata.get("_awa_original_priority", record.priority)
    if descriptors is not None:
        row["queue_descriptor"] = descriptors.get("queues", {}).get(record.queue)
        row["kind_descriptor"] = descriptors.get("kinds", {}).get(record.kind)
    return row


def dlq_json(entry: DlqEntry, descriptors: dict[str, Any] | None = None) -> dict[str, Any]:
    """A DLQ entry as awa-cli answers it: the job's columns (state ``failed``) with
    ``dlq_reason``, ``dlq_at`` and ``original_run_lease``; ``job`` and ``reason`` repeat
    them in the nested form the pages read."""
    return {
        **job_json(entry.job, descriptors),
        "dlq_reason": entry.reason,
        "dlq_at": rfc3339(entry.dlq_at),
        "original_run_lease": entry.original_run_lease,
        "job": job_json(entry.job),
        "reason": entry.reason,
    }


def descriptor_columns(descriptor: dict[str, Any] | None) -> dict[str, Any]:
    """A queue's or kind's descriptor as the flat columns of its list row (awa-cli's
    shape): the declared fields, when a runtime last refreshed it, and its flags."""
    d = descriptor or {}
    return {
        "display_name": d.get("display_name"),
        "description": d.get("description"),
        "owner": d.get("owner"),
        "docs_url": d.get("docs_url"),
        "tags": list(d.get("tags") or ()),
        "extra": d.get("extra") or {},
        "descriptor_last_seen_at": d.get("last_seen_at"),
        "descriptor_stale": bool(d.get("stale")),
        "descriptor_mismatch": bool(d.get("drift")),
    }


def _queue_json(c: QueueCounts, dlq: int, now: datetime) -> dict[str, Any]:
    lag = c.lag(now)
    row: dict[str, Any] = {"queue": c.queue}
    row.update({str(state): c.count(state) for state in JobState})
    row.update(
        {
            "total_queued": c.total_queued,
            "completed_last_hour": c.completed_last_hour,
            "lag_seconds": None if lag is None else lag.total_seconds(),
            "paused": c.paused,
            "dlq_depth": dlq,
        }
    )
    return row


def queue_config_json(q: QueueSnapshot) -> dict[str, Any]:
    """A runtime's configuration of one queue, as awa-cli's ``config`` object: the
    weighted-mode fields (``min_workers``, ``weight``) only in weighted mode, where they
    mean something, as awa-cli shows them."""
    weighted = q.mode == "weighted"
    return {
        "mode": q.mode,
        "max_workers": q.max_workers,
        "min_workers": q.min_workers if weighted else None,
        "weight": q.weight if weighted else None,
        "global_max_workers": q.global_max_workers,
        "rate_limit": None
        if q.rate_limit is None
        else {"max_rate": q.rate_limit[0], "burst": q.rate_limit[1]},
        "poll_interval_ms": q.poll_interval_ms,
        "deadline_duration_secs": None if q.deadline_ms is None else q.deadline_ms // 1000,
        "priority_aging_interval_secs": None
        if q.aging_interval_ms is None
        else q.aging_interval_ms // 1000,
        "claimers": q.claimers,
        "claim_batch_size": q.claim_batch_size,
        # A runtime has no dead-letter setting of its own: the queue's DLQ switch is
        # stored with the queue (``awa dlq``), not in any runtime's configuration.
        "dlq_enabled": False,
    }


def runtime_json(snap: RuntimeSnapshot, now: datetime) -> dict[str, Any]:
    """One runtime instance: awa-cli's keys (``instance_id``, ``queues[].queue`` and
    ``config``, ...) plus ``id``, ``live`` and the queues' flat capacity fields."""
    # Whether it still runs: a runtime announcing its shutdown still counts here (it says
    # so in ``shutting_down``), as in ``awa storage status``'s count of live runtimes.
    live = is_live(snap.last_seen_at, snap.snapshot_interval_ms, now, shutting_down=False)
    configs = [queue_config_json(q) for q in snap.queues]
    return {
        "id": snap.id,
        "instance_id": snap.id,
        "hostname": snap.hostname,
        "pid": snap.pid,
        "version": snap.version,
        "storage_capability": snap.storage_capability,
        "transition_role": snap.transition_role,
        "started_at": rfc3339(snap.started_at),
        "last_seen_at": rfc3339(snap.last_seen_at),
        "live": live,
        "stale": not live,
        "leader": snap.leader,
        "healthy": snap.healthy,
        "postgres_connected": snap.postgres_connected,
        "poll_loop_alive": snap.poll_loop_alive,
        "heartbeat_alive": snap.heartbeat_alive,
        "maintenance_alive": snap.maintenance_alive,
        "shutting_down": snap.shutting_down,
        "snapshot_interval_ms": snap.snapshot_interval_ms,
        "global_max_workers": next(
            (q.global_max_workers for q in snap.queues if q.global_max_workers is not None),
            None,
        ),
        "queues": [
            {
                "queue": q.name,
                "name": q.name,
                "in_flight": q.in_flight,
                "overflow_held": q.overflow_held,
                "config": config,
                "max_workers": q.max_workers,
                "min_workers": q.min_workers,
                "weight": q.weight,
                "rate_limit": config["rate_limit"],
            }
            for q, config in zip(snap.queues, configs, strict=True)
        ],
    }


def limit_of(value: int | None, default: int = 100) -> int:
    return default if value is None else max(1, min(MAX_LIMIT, value))


class AdminReads:
    """Cached and uncached reads over one :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient, cache: ReadCache) -> None:
        self.client = client
        self.cache = cache

    # ------------------------------------------------------------------ jobs
    async def jobs(self, job_filter: JobFilter, *, limit: int) -> list[dict[str, Any]]:
        """A page of jobs, newest first. Cached per filter for the TTL like the counts:
        on queue storage a page resolves every job's facts, which no poll should repeat."""

        async def load() -> list[JobRecord]:
            return await (await self.client.admin_engine()).list_jobs(job_filter, limit=limit)

        key = f"jobs:{job_filter!r}:{limit}"
        records: list[JobRecord] = await self.cache.get(key, load)
        descriptors = await self.descriptors()
        expressions = await self._expressions(records)
        held = await self._held_back(records)
        return [
            {**job_json(r, descriptors, expressions.get(r.id)), "held_back": held.get(r.id)}
            for r in records
        ]

    async def _held_back(self, records: list[JobRecord]) -> dict[int, dict[str, Any] | None]:
        """The ``held_back`` key of each job that a limit holds back now, by job id."""
        control = await self.client.admin_control_plane()
        reasons = await held_back_of(control, records, _now())
        return {job_id: held_back_json(reason) for job_id, reason in reasons.items()}

    async def _expressions(self, records: list[JobRecord]) -> dict[int, CallbackExpressions]:
        """The CEL expressions of the callbacks these jobs wait on, by job id."""
        engine = await self.client.admin_engine()
        found: dict[int, CallbackExpressions] = {}
        for record in records:
            if record.callback_id is None:
                continue
            try:
                expressions = await engine.callback_expressions(record.callback_id)
            except AwaError:  # the callback ended since the row was read
                continue
            if expressions is not None:
                found[record.id] = expressions
        return found

    async def job(self, job_id: int) -> dict[str, Any] | None:
        """One job as awa-cli answers it (the row's columns, descriptors and, when it was
        dead-lettered, a ``dlq`` block), plus ``job`` / ``summary`` / ``timeline``: the
        document the job page renders. ``None`` when there is no such job."""

        async def load() -> tuple[JobRecord | None, DlqEntry | None]:
            engine = await self.client.admin_engine()
            found = await engine.get_job(job_id)
            return found, (await engine.get_dlq(job_id) if found is None else None)

        found: tuple[JobRecord | None, DlqEntry | None] = await self.cache.get(
            f"job:{job_id}", load
        )
        record, dlq = found
        if record is None and dlq is None:
            return None
        doc = job_document(record, dlq)
        source = record if record is not None else dlq.job  # type: ignore[union-attr]
        expressions = (await self._expressions([source])).get(source.id)
        row = job_json(source, await self.descriptors(), expressions)
        row["held_back"] = (await self._held_back([source])).get(source.id)
        doc["job"] = {**doc["job"], **row}
        return {**row, **doc}

    async def relations(self, job_id: int) -> dict[str, Any] | None:
        """A job's parents, children and stored result (``awa job get``'s shape), or
        ``None`` when there is no such job."""
        found: dict[str, Any] | None = await self.cache.get(
            f"relations:{job_id}", lambda: job_relations(self.client, job_id)
        )
        return found

    async def batch(self, batch_id: int) -> dict[str, Any] | None:
        """A batch's progress (``awa batch show``'s shape), or ``None`` when no batch
        has this id."""

        async def load() -> dict[str, Any] | None:
            try:
                return batch_json(await self.client.get_batch(batch_id))
            except JobNotFound:
                return None

        found: dict[str, Any] | None = await self.cache.get(f"batch:{batch_id}", load)
        return found

    async def graph(self, job_id: int) -> dict[str, Any] | None:
        """The workflow graph around a job, or ``None`` when there is no such job."""
        found: dict[str, Any] | None = await self.cache.get(
            f"graph:{job_id}", lambda: workflow_graph(self.client, job_id)
        )
        return found

    async def queue_keys(self, queue: str, limit: int) -> dict[str, Any]:
        """A queue's busiest concurrency keys and the limits set on it (``awa queue
        keys``' shape)."""
        found: dict[str, Any] = await self.cache.get(
            f"keys:{queue}:{limit}", lambda: queue_keys(self.client, queue, limit=limit)
        )
        return found

    # ------------------------------------------------------------------ stats
    async def _queue_counts(self) -> list[QueueCounts]:
        async def load() -> list[QueueCounts]:
            return await (await self.client.admin_engine()).queue_counts()

        counts: list[QueueCounts] = await self.cache.get("queue_counts", load)
        return counts

    async def stats(
        self, queue: str | None = None, *, dead_lettered_as_failed: bool = False
    ) -> dict[str, int]:
        """Jobs per state across every queue, or in ``queue``: jobs only (a DLQ entry is
        not a job), so the counts match what a job list of that state shows. With
        ``dead_lettered_as_failed`` (``/api/stats``), dead-lettered jobs count as
        ``failed``, as awa-cli counts them (the queue list's rule, :func:`listed_queues`)."""
        totals = {str(state): 0 for state in JobState}
        dlq = await self._dlq_by_queue() if dead_lettered_as_failed else {}
        for c in listed_queues(await self._queue_counts(), dlq, ()):
            if queue is not None and c.queue != queue:
                continue
            for state in JobState:
                totals[str(state)] += c.count(state)
        return totals

    async def timeseries(self, minutes: int) -> list[dict[str, Any]]:
        """Jobs finalized per minute and terminal state over the last ``minutes``."""

        async def load() -> list[dict[str, Any]]:
            engine = await self.client.admin_engine()
            buckets = await engine.finalized_timeseries(window=timedelta(minutes=minutes))
            return [
                {"bucket": rfc3339(b.bucket), "state": str(b.state), "count": b.count}
                for b in buckets
            ]

        rows: list[dict[str, Any]] = await self.cache.get(f"timeseries:{minutes}", load)
        return rows

    async def finished_per_minute(self, minutes: int) -> dict[str, Any]:
        """Per queue and minute over the last ``minutes`` (whole minutes, the current one
        last): ``completed`` and ``failed`` counts, failed counting the jobs since moved
        to the DLQ, as ``{"minutes": [datetime], "completed": {queue: [n]}, "failed":
        {queue: [n]}}`` with every list aligned with ``minutes``."""
        window = timedelta(minutes=minutes)

        async def load() -> tuple[list[QueueStateBucket], list[QueueStateBucket]]:
            engine = await self.client.admin_engine()
            finished = await engine.finalized_by_queue(window=window)
            return finished, await engine.dlq_by_minute(window=window)

        loaded: tuple[list[QueueStateBucket], list[QueueStateBucket]] = await self.cache.get(
            f"finished_by_queue:{minutes}", load
        )
        finished, dead = loaded
        now = _now()
        start = first_minute(now, window)
        count = int((minute_of(now) - start) / timedelta(minutes=1)) + 1
        slots = [start + timedelta(minutes=i) for i in range(count)]
        series: dict[JobState, dict[str, list[int]]] = {JobState.Completed: {}, JobState.Failed: {}}
        for bucket in (*finished, *dead):
            per_queue = series.get(bucket.state)
            index = int((bucket.bucket - start) / timedelta(minutes=1))
            if per_queue is None or not 0 <= index < count:
                continue
            per_queue.setdefault(bucket.queue, [0] * count)[index] += bucket.count
        return {
            "minutes": slots,
            "completed": series[JobState.Completed],
            "failed": series[JobState.Failed],
        }

    async def queue_history(self, minutes: int) -> dict[str, Any]:
        """Per queue and minute over the last ``minutes``, the waiting (available) jobs
        and the lag the maintenance leader sampled (the latest sample of each minute), as
        ``{"minutes": [datetime], "depth": {queue: [n | None]}, "lag": {queue:
        [seconds | None]}}``. ``None`` marks a minute without a sample (no leader ran);
        a queue missing from a sampled minute had no live job then, so it reads 0."""
        window = timedelta(minutes=minutes)
        now = _now()
        start = first_minute(now, window)

        async def load() -> list[QueueSample]:
            control = await self.client.admin_control_plane()
            return await control.queue_samples.queue_samples(since=start)

        samples: list[QueueSample] = await self.cache.get(f"queue_samples:{minutes}", load)
        count = int((minute_of(now) - start) / timedelta(minutes=1)) + 1
        sampled = [False] * count
        depth: dict[str, list[float | None]] = {}
        lag: dict[str, list[float | None]] = {}
        for sample in samples:
            index = int((sample.sampled_at - start) / timedelta(minutes=1))
            if not 0 <= index < count:
                continue
            sampled[index] = True
            depth.setdefault(sample.queue, [None] * count)[index] = sample.count(JobState.Available)
            lag.setdefault(sample.queue, [None] * count)[index] = sample.lag_seconds
        for queue in depth:
            for index in range(count):
                if sampled[index] and depth[queue][index] is None:
                    depth[queue][index] = 0
                    lag[queue][index] = 0.0
        return {
            "minutes": [start + timedelta(minutes=i) for i in range(count)],
            "depth": depth,
            "lag": lag,
        }

    async def queue_names(self) -> list[str]:
        """Queues with jobs, dead-lettered ones included (awa-cli's ``/api/stats/queues``)."""
        counts = listed_queues(await self._queue_counts(), await self._dlq_by_queue(), ())
        return [c.queue for c in counts]

    async def kind_names(self) -> list[str]:
        """Kinds with jobs, dead-lettered ones included (awa-cli's ``/api/stats/kinds``)."""
        return [k["kind"] for k in await self.kinds() if k["job_count"]]

    # ------------------------------------------------------------------ queues
    async def _dlq_by_queue(self) -> dict[str, int]:
        async def load() -> dict[str, int]:
            return dict(await self.client.dlq_depth_by_queue())

        depth: dict[str, int] = await self.cache.get("dlq_by_queue", load)
        return depth

    async def queues(self) -> list[dict[str, Any]]:
        """Every queue awa-cli lists: those with jobs, those whose jobs are all
        dead-lettered and those a runtime declared (see :func:`listed_queues`), each with
        its descriptor's columns; ``failed`` counts dead-lettered jobs as awa-pg does."""
        now = _now()
        dlq = await self._dlq_by_queue()
        descriptors = await self.descriptors()
        listed = listed_queues(await self._queue_counts(), dlq, descriptors["queues"])
        # Available jobs the queue's fleet-wide rate limit in force holds back now (ADR 0029).
        held = await rate_limited_by_queue(
            await self.client.admin_control_plane(),
            {c.queue: c.count(JobState.Available) for c in listed},
            now,
        )
        rows = []
        for c in listed:
            row = _queue_json(c, dlq.get(c.queue, 0), now)
            row["rate_limited"] = held.get(c.queue, 0)
            row.update(descriptor_columns(descriptors["queues"].get(c.queue)))
            row["descriptor"] = descriptors["queues"].get(c.queue)
            rows.append(row)
        return rows

    async def queue(self, name: str) -> dict[str, Any] | None:
        return next((q for q in await self.queues() if q["queue"] == name), None)

    async def queue_runtime(self) -> list[dict[str, Any]]:
        """Per queue, what the runtimes serving it configured: awa-cli's counts of
        instances (live, stale, healthy), the in-flight total, the newest live config and
        whether live ones differ; ``instances`` lists the live ones."""
        per_queue: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
        for instance in (await self.runtime())["instances"]:
            for q in instance["queues"]:
                per_queue[q["queue"]].append((instance, q))
        result = []
        for name in sorted(per_queue):
            live = [(i, q) for i, q in per_queue[name] if i["live"]]
            configs = [{"instance_id": i["id"], **q} for i, q in live]
            shapes = {json.dumps(q["config"], sort_keys=True) for _, q in live}
            held = [q["overflow_held"] for _, q in live if q["overflow_held"] is not None]
            result.append(
                {
                    "queue": name,
                    "instance_count": len(per_queue[name]),
                    "live_instances": len(live),
                    "stale_instances": len(per_queue[name]) - len(live),
                    "healthy_instances": sum(1 for i, _ in live if i["healthy"]),
                    "total_in_flight": sum(q["in_flight"] for _, q in live),
                    "in_flight": sum(q["in_flight"] for _, q in live),
                    "overflow_held_total": sum(held) if held else None,
                    "config": live[0][1]["config"] if live else per_queue[name][0][1]["config"],
                    "config_mismatch": len(shapes) > 1,
                    "instances": configs,
                }
            )
        return result

    # ------------------------------------------------------------------ kinds
    async def kinds(self) -> list[dict[str, Any]]:
        """Every kind awa-cli lists (see :func:`listed_kinds`: dead-lettered jobs count,
        declared kinds with no jobs show), with its descriptor's columns and
        ``handler_missing``: it has jobs but no running worker handles it."""

        async def load() -> list[KindCounts]:
            engine = await self.client.admin_engine()
            return [*await engine.kind_counts()]

        async def load_dlq() -> list[tuple[str, str, int]]:
            engine = await self.client.admin_engine()
            return await engine.dlq_depth_by_kind()

        counts: list[KindCounts] = await self.cache.get("kinds", load)
        dlq: list[tuple[str, str, int]] = await self.cache.get("dlq_by_kind", load_dlq)
        descriptors = await self.descriptors()
        rows = []
        for k in listed_kinds(counts, dlq, descriptors["kinds"]):
            descriptor = descriptors["kinds"].get(k.kind)
            rows.append(
                {
                    "kind": k.kind,
                    "job_count": k.job_count,
                    "queue_count": k.queue_count,
                    "completed_last_hour": k.completed_last_hour,
                    **descriptor_columns(descriptor),
                    "descriptor": descriptor,
                    "handler_missing": handler_missing(
                        k.job_count, None if descriptor is None else descriptor["stale"]
                    ),
                }
            )
        return rows

    async def descriptors(self) -> dict[str, dict[str, Any]]:
        """Queue and kind descriptors by name."""

        async def load() -> dict[str, dict[str, Any]]:
            queues = await self.client.list_queue_descriptors()
            kinds = await self.client.list_job_kind_descriptors()
            return {
                "queues": {d["queue"]: d for d in queues},
                "kinds": {d["kind"]: d for d in kinds},
            }

        found: dict[str, dict[str, Any]] = await self.cache.get("descriptors", load)
        return found

    # ------------------------------------------------------------------ cron
    async def cron_schedules(self) -> list[dict[str, Any]]:
        """Stored schedules (``list_cron_jobs`` rows) plus ``next_fire_at``: the next time
        the schedule fires, ``None`` while it is paused (it fires nothing then) or when a
        stored expression can no longer be read."""

        async def load() -> list[dict[str, Any]]:
            return await self.client.list_cron_jobs()

        rows: list[dict[str, Any]] = await self.cache.get("cron", load)
        now = _now()
        return [
            {
                **row,
                "next_fire_at": None
                if row["paused_at"] is not None
                else next_fire_at(row["cron_expr"], row["timezone"], now),
            }
            for row in rows
        ]

    # ------------------------------------------------------------------ batch operations
    async def batch_operations(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        async def load() -> list[dict[str, Any]]:
            ops = await self.client.list_batch_operations(state=state, limit=limit)  # type: ignore[arg-type]
            return [dict(op) for op in ops]

        rows: list[dict[str, Any]] = await self.cache.get(f"batch-ops:{state}:{limit}", load)
        return rows

    async def batch_operation(self, operation_id: str) -> dict[str, Any]:
        """One operation; 400 for an id that is not a UUID, 404 for an unknown one."""
        try:
            operation_id = parse_operation_id(operation_id)
        except ValidationError as exc:
            raise bad_request(str(exc)) from None
        try:
            return dict(await self.client.get_batch_operation(operation_id))
        except ValidationError:
            raise not_found(f"batch operation not found: {operation_id}") from None

    # ------------------------------------------------------------------ DLQ
    async def dlq(self, dlq_filter: DlqFilter, *, limit: int) -> list[dict[str, Any]]:
        async def load() -> list[DlqEntry]:
            return await (await self.client.admin_engine()).list_dlq(dlq_filter, limit=limit)

        entries: list[DlqEntry] = await self.cache.get(f"dlq:{dlq_filter!r}:{limit}", load)
        return [dlq_json(e) for e in entries]

    async def recent_failures(self, *, limit: int) -> list[dict[str, Any]]:
        """The latest failures wherever they now are: failed jobs and dead-lettered ones,
        newest first by when they failed (a DLQ entry by when it was moved). Each row is
        a job row plus ``failed_at``, ``last_error`` and ``dlq`` (``None`` or the entry's
        ``reason`` and ``dlq_at``)."""
        rows: list[dict[str, Any]] = []
        for job in await self.jobs(JobFilter(state=JobState.Failed), limit=limit):
            rows.append({**job, "failed_at": job["finalized_at"], "dlq": None})
        for entry in await self.dlq(DlqFilter(), limit=limit):
            at = entry["dlq_at"]
            dlq = {"reason": entry["reason"], "dlq_at": at}
            rows.append({**entry["job"], "failed_at": at, "dlq": dlq})
        for row in rows:
            errors = row.get("errors") or []
            row["last_error"] = errors[-1].get("error") if errors else None
        # RFC 3339 strings in UTC sort as the instants they name; a row without a time
        # (never finalized) sorts last.
        rows.sort(key=lambda r: (r["failed_at"] or "", r["id"]), reverse=True)
        return rows[:limit]

    async def dlq_entry(self, job_id: int) -> dict[str, Any] | None:
        entry = await (await self.client.admin_engine()).get_dlq(job_id)
        return None if entry is None else dlq_json(entry, await self.descriptors())

    async def dlq_depth(self) -> dict[str, Any]:
        by_queue = await self._dlq_by_queue()
        return {
            "total": sum(by_queue.values()),
            "by_queue": [{"queue": q, "count": n} for q, n in sorted(by_queue.items())],
        }

    # ------------------------------------------------------------------ runtimes
    async def runtime(self) -> dict[str, Any]:
        async def load() -> dict[str, Any]:
            registry = await self.client.runtime_registry()
            now = _now()
            instances = [runtime_json(s, now) for s in await registry.list_runtimes()]
            live = [i for i in instances if i["live"]]
            counts = {
                "total": len(instances),
                "live": len(live),
                "stale": len(instances) - len(live),
                "healthy": sum(1 for i in live if i["healthy"]),
                "leader": sum(1 for i in live if i["leader"]),
            }
            # awa-cli's names (``total_instances``, ...) and the short ones the pages read.
            return {
                **{f"{name}_instances": n for name, n in counts.items()},
                **counts,
                "instances": instances,
            }

        doc: dict[str, Any] = await self.cache.get("runtime", load)
        return doc

    async def runtime_instance(self, instance_id: str) -> dict[str, Any] | None:
        instances = (await self.runtime())["instances"]
        return next((i for i in instances if i["id"] == instance_id), None)

    # ------------------------------------------------------------------ storage
    async def storage(self) -> dict[str, Any]:
        async def load() -> dict[str, Any]:
            report: dict[str, Any] = json.loads(await self.client.storage_status())
            return report

        doc: dict[str, Any] = await self.cache.get("storage", load)
        return doc
