"""The keyword options of every job insert and of ``periodic()``, declared once (ADR 0027).

Each insert entry point (``AsyncClient.insert`` / ``insert_many_copy`` /
``enqueue_many_copy``, their blocking twins, ``Transaction.insert`` / ``insert_many``,
``insert_job`` / ``insert_job_sync``) and ``periodic()`` takes ``**options:
Unpack[...]`` of one of the TypedDicts below, so a type checker completes and checks the
keywords (PEP 692) and a new option is added here once. Every key may be left out; what
an absent key means is stated on its line and applied by
:func:`awa.entrypoints.args.build_spec` (the bridge, ``build_schedule``), from the
constants of :mod:`awa.domain.job` and :mod:`awa.domain.cron`.

At run time :func:`awa.domain.keywords.check_keywords` refuses a keyword the entry point
does not take, with Python's own ``TypeError`` wording, as a plain signature would.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict


class QueueingOptions(TypedDict, total=False):
    """Where and how a job waits and runs: every insert and ``periodic()`` take these."""

    queue: str
    """The queue; absent: ``"default"``."""
    priority: int
    """1 (highest) to 4 (lowest); absent: 2."""
    max_attempts: int
    """Attempts before the job fails for good, 1 to 1000; absent: 25."""
    tags: list[str] | tuple[str, ...] | None
    """Labels stored with the job; absent: none."""
    metadata: dict[str, Any] | None
    """A JSON object stored with the job; absent: ``{}``."""


class JobOptions(QueueingOptions, total=False):
    """What every insert takes, the SQL producer contract (``insert_job``) included."""

    kind: str | None
    """The job kind; absent or ``None``: derived from the args class name
    (``SendEmail`` -> ``send_email``)."""
    run_at: datetime | str | None
    """When the job may first run (a naive datetime or string is UTC); set, the job is
    ``scheduled``; absent: now."""
    ordering_key: bytes | str | None
    """Jobs with the same key share a shard of a sharded queue; absent: none."""
    concurrency_key: str | None
    """The key (a tenant, an account) whose running jobs the queue's
    ``max_running_per_key`` limits across the fleet; stored in the job's metadata as
    ``awa:concurrency_key``; absent: none (not limited)."""


class PeriodicOptions(QueueingOptions, total=False):
    """``AsyncClient.periodic()``: the job each fire enqueues, and when it fires."""

    timezone: str
    """The IANA zone the cron expression is read in; absent: ``"UTC"``."""
    missed_fire_policy: str
    """``"coalesce"`` enqueues only the latest missed fire, ``"catch_up"`` every one;
    absent: ``"coalesce"``."""


class InsertOptions(JobOptions, total=False):
    """The options of a client insert and of ``Transaction.insert``."""

    unique_opts: dict[str, Any] | None
    """Uniqueness (``by_args``, ``by_queue``, ``by_period``, ``states``, ``on_conflict``):
    with ``on_conflict`` ``"skip"`` (the default) a single insert raises
    ``UniqueConflict`` while a live job holds the key and a bulk insert skips it;
    ``"replace"`` or ``{"debounce": s, "max_wait": s}`` merge the insert into the job
    holding the key while it waits (ADR 0034, ``Job.insert_outcome`` says which)."""


class BridgeOptions(JobOptions, total=False):
    """``awa.bridge.insert_job`` / ``insert_job_sync``."""

    unique_opts: dict[str, Any] | None
    """As for a client insert (the key is computed here and sent to
    ``awa.insert_job_compat``); a clash raises the driver's unique violation on
    ``job_unique_claims_pkey`` unless ``on_conflict`` merges the insert."""


class DependencyOption(TypedDict, total=False):
    depends_on: Sequence[int | Any] | None
    """Jobs (ids or job handles, or ``awa.Dependency(job, on_failure=...)``) this one
    waits on: it stays ``scheduled`` until all of them completed; a parent that fails or
    is cancelled cancels it (``on_failure="cancel"``, the default), lets it run anyway
    (``"run"``) or moves it to the DLQ (``"dlq"``) (ADR 0032); an unknown or failed
    parent is refused; at most 100; not with ``run_at``; absent: none."""


class StripeOption(TypedDict, total=False):
    queue_storage_queue_stripe_count: int
    """How many stripes ``queue#0 .. queue#(N-1)`` each queue has on queue storage; must
    be the fleet's (``start(queue_storage_queue_stripe_count=...)``); absent: 1."""


class BatchOption(TypedDict, total=False):
    opts: list[dict[str, Any] | None] | None
    """Per-job overrides of ``queue``, ``ordering_key`` and ``concurrency_key``, one entry
    (or ``None``) per job."""


class ClientInsertOptions(InsertOptions, DependencyOption, StripeOption, total=False):
    """``AsyncClient.insert``, ``Client.insert`` and ``Transaction.insert``."""


class ClientBulkInsertOptions(InsertOptions, StripeOption, BatchOption, total=False):
    """``insert_many_copy`` and ``enqueue_many_copy``."""


class TransactionBulkInsertOptions(JobOptions, StripeOption, total=False):
    """``Transaction.insert_many`` (as awa-pg: no ``unique_opts``, no ``opts``)."""
