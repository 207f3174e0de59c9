"""Client transactions: raw SQL with ``$1``-style placeholders and job inserts, atomically."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from types import TracebackType
from typing import Any, Protocol, TypeVar, Unpack

from awa.adapters._pg import raw_sql
from awa.adapters._pg.pool import DictConnection
from awa.domain.errors import AwaError, DatabaseError
from awa.domain.job import DEFAULT_QUEUE, JobRecord, JobSpec
from awa.domain.keywords import check_keywords
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES, validate_stripe_count
from awa.entrypoints.args import build_spec, build_specs, with_parents
from awa.entrypoints.insert_options import (
    ClientInsertOptions,
    InsertOptions,
    JobOptions,
    TransactionBulkInsertOptions,
)
from awa.entrypoints.job import Job
from awa.ports.storage import UnitOfWork
from awa.runtime import metrics, tracing

R = TypeVar("R")

Connection = DictConnection

FINISHED = "Transaction already committed or rolled back"
NO_ROWS = "no rows returned by a query that expected to return at least one row"


class TransactionalEngine(Protocol):
    """The engine operations a client transaction needs."""

    def unit_of_work_for(self, conn: Connection) -> UnitOfWork: ...

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        uow: UnitOfWork | None = None,
        stripes: int = DEFAULT_QUEUE_STRIPES,
        validated: bool = False,
    ) -> list[JobRecord]: ...


def _value(value: Any) -> Any:
    """Column values as plain Python: timestamps as RFC 3339 text, as the SDK returns them."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _value(value) for key, value in row.items()}


def _map(exc: BaseException) -> AwaError:
    if isinstance(exc, AwaError):
        return exc
    return raw_sql.database_error(exc)


class Transaction:
    """A database transaction on one connection: ``async with await client.transaction()``.

    Commits when the block exits normally and rolls back when it raises. Queries use
    PostgreSQL's ``$1, $2, ...`` placeholders.
    """

    def __init__(
        self,
        conn: Connection,
        engine: TransactionalEngine,
        release: Callable[[Connection], Awaitable[None]],
    ) -> None:
        self._conn = conn
        self._engine = engine
        self._release = release
        self._finished = False
        self._uow: UnitOfWork | None = None
        #: jobs inserted here, counted in ``awa.job.inserted`` once the commit succeeds
        self._inserted: list[JobSpec] = []

    @classmethod
    async def begin(
        cls,
        conn: Connection,
        engine: TransactionalEngine,
        release: Callable[[Connection], Awaitable[None]],
    ) -> Transaction:
        """Start a transaction on ``conn`` (an autocommit connection borrowed from a pool)."""
        try:
            await raw_sql.begin(conn)
        except BaseException as exc:
            await release(conn)
            raise _map(exc) from exc
        return cls(conn, engine, release)

    def _check(self) -> Connection:
        if self._finished:
            raise AwaError(FINISHED)
        return self._conn

    async def execute(self, query: str, *args: Any) -> int:
        """Run a statement; returns the number of rows affected."""
        return await raw_sql.execute(self._check(), query, args)

    async def fetch_one(self, query: str, *args: Any) -> dict[str, Any]:
        """The first row as a dict; raises ``DatabaseError`` when there is none."""
        row = await raw_sql.fetch_first(self._check(), query, args)
        if row is None:
            raise DatabaseError(NO_ROWS)
        return _row(row)

    async def fetch_optional(self, query: str, *args: Any) -> dict[str, Any] | None:
        """The first row as a dict, or ``None``."""
        row = await raw_sql.fetch_first(self._check(), query, args)
        return None if row is None else _row(row)

    async def fetch_all(self, query: str, *args: Any) -> list[dict[str, Any]]:
        """Every row as a dict."""
        return [_row(r) for r in await raw_sql.fetch_all(self._check(), query, args)]

    def _unit_of_work(self) -> UnitOfWork:
        conn = self._check()
        if self._uow is None:
            self._uow = self._engine.unit_of_work_for(conn)
        return self._uow

    async def insert(self, args: Any, **options: Unpack[ClientInsertOptions]) -> Job[Any]:
        """Insert a job inside this transaction (it exists only if the transaction commits).

        ``queue_storage_queue_stripe_count`` must match the fleet's: on queue storage the
        job goes to one stripe ``queue#k`` of its queue."""
        check_keywords("Transaction.insert", options, ClientInsertOptions)
        stripes = validate_stripe_count(
            options.pop("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
        )
        with tracing.producer_span(options.get("queue", DEFAULT_QUEUE)):
            depends_on = options.pop("depends_on", None)
            spec_options: InsertOptions = options
            spec = with_parents(build_spec(args, **spec_options), depends_on)
            return (await self._insert_specs([spec], stripes))[0]

    async def _insert_specs(
        self, specs: list[JobSpec], stripes: int = DEFAULT_QUEUE_STRIPES
    ) -> list[Job[Any]]:
        """Insert ``specs``, already built and checked, in this transaction, in order
        (the builders' path: ``awa.Batch``)."""
        records = await self._engine.enqueue_many(
            specs, uow=self._unit_of_work(), stripes=stripes, validated=True
        )
        self._inserted.extend(specs)
        return [Job(r) for r in records]

    async def insert_many(
        self, jobs: list[Any], **options: Unpack[TransactionBulkInsertOptions]
    ) -> list[Job[Any]]:
        """Insert several jobs inside this transaction, in order (spread over the
        queue's stripes on queue storage when ``queue_storage_queue_stripe_count > 1``)."""
        check_keywords("Transaction.insert_many", options, TransactionBulkInsertOptions)
        stripes = validate_stripe_count(
            options.pop("queue_storage_queue_stripe_count", DEFAULT_QUEUE_STRIPES)
        )
        with tracing.producer_span(options.get("queue", DEFAULT_QUEUE), len(jobs)):
            spec_options: JobOptions = options
            specs = build_specs(jobs, **spec_options)
            if not specs:
                return []
            records = await self._engine.enqueue_many(
                specs, uow=self._unit_of_work(), stripes=stripes, validated=True
            )
            self._inserted.extend(specs)
            return [Job(r) for r in records]

    async def _finish(self, *, commit: bool) -> bool:
        """End the transaction; whether a commit kept its work."""
        conn = self._check()
        self._finished = True
        try:
            return await raw_sql.finish(conn, commit=commit)
        finally:
            await self._release(conn)

    async def commit(self) -> None:
        """Commit; the transaction cannot be used afterwards."""
        if await self._finish(commit=True):
            metrics.count_inserted(self._inserted)

    async def rollback(self) -> None:
        """Roll back; the transaction cannot be used afterwards."""
        await self._finish(commit=False)

    @property
    def finished(self) -> bool:
        return self._finished

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool:
        if self._finished:
            return False
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()
        return False


class SyncTransaction:
    """Blocking twin of :class:`Transaction` (``with client.transaction() as tx``)."""

    def __init__(self, tx: Transaction, run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        self._tx = tx
        self._run = run

    def execute(self, query: str, *args: Any) -> int:
        """Run a statement; returns the number of rows affected."""
        result: int = self._run(self._tx.execute(query, *args))
        return result

    def fetch_one(self, query: str, *args: Any) -> dict[str, Any]:
        """The first row as a dict; raises ``DatabaseError`` when there is none."""
        result: dict[str, Any] = self._run(self._tx.fetch_one(query, *args))
        return result

    def fetch_optional(self, query: str, *args: Any) -> dict[str, Any] | None:
        """The first row as a dict, or ``None``."""
        result: dict[str, Any] | None = self._run(self._tx.fetch_optional(query, *args))
        return result

    def fetch_all(self, query: str, *args: Any) -> list[dict[str, Any]]:
        """Every row as a dict."""
        result: list[dict[str, Any]] = self._run(self._tx.fetch_all(query, *args))
        return result

    def insert(self, args: Any, **options: Unpack[ClientInsertOptions]) -> Job[Any]:
        """Insert a job inside this transaction (same options as ``Transaction.insert``)."""
        check_keywords("SyncTransaction.insert", options, ClientInsertOptions)
        result: Job[Any] = self._run(self._tx.insert(args, **options))
        return result

    def insert_many(
        self, jobs: list[Any], **options: Unpack[TransactionBulkInsertOptions]
    ) -> list[Job[Any]]:
        """Insert several jobs inside this transaction."""
        check_keywords("SyncTransaction.insert_many", options, TransactionBulkInsertOptions)
        result: list[Job[Any]] = self._run(self._tx.insert_many(jobs, **options))
        return result

    def _insert_specs(self, specs: list[JobSpec]) -> list[Job[Any]]:
        """Blocking twin of :meth:`Transaction._insert_specs`."""
        result: list[Job[Any]] = self._run(self._tx._insert_specs(specs))
        return result

    def commit(self) -> None:
        """Commit; the transaction cannot be used afterwards."""
        self._run(self._tx.commit())

    def rollback(self) -> None:
        """Roll back; the transaction cannot be used afterwards."""
        self._run(self._tx.rollback())

    def __enter__(self) -> SyncTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool:
        result: bool = self._run(self._tx.__aexit__(exc_type, exc_val, exc_tb))
        return result
