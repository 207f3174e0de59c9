"""Map driver errors to domain errors by SQLSTATE and constraint name (never message text)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from awa.adapters._pg.conninfo import scrub_exception
from awa.domain.errors import (
    AwaError,
    DatabaseError,
    SchemaNotMigrated,
    UniqueConflict,
    ValidationError,
)

UNIQUE_CLAIMS_CONSTRAINT = "job_unique_claims_pkey"

_CHECK_TABLE_PREFIXES = (
    "canonical_jobs_",
    "ready_entries_",
    "deferred_jobs_",
    "queue_meta_",
    "cron_jobs_",
    "runtime_instances_",
    "storage_transition_state_",
)

_SCHEMA_SQLSTATES = frozenset(
    {
        "42P01",  # undefined_table
        "42883",  # undefined_function
        "3F000",  # invalid_schema_name
        "42704",  # undefined_object (e.g. the awa.job_state type)
        "42703",  # undefined_column: an older schema
    }
)


def column_for_check(constraint: str | None) -> str:
    """The input field a check constraint guards, from its name (``<table>_<col>_check``)."""
    if not constraint:
        return "value"
    name = constraint.removesuffix("_check")
    for prefix in _CHECK_TABLE_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def map_error(exc: BaseException) -> AwaError:
    """The domain error for a driver exception; neither it nor ``exc`` (which becomes its
    ``__cause__``) keeps a password the driver quoted from a connection string."""
    if isinstance(exc, AwaError):
        return exc
    scrub_exception(exc)
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg_pool.PoolClosed):
        return DatabaseError(f"connection pool unavailable: {exc}")
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate
        diag = exc.diag
        if isinstance(exc, pg_errors.UniqueViolation):
            if diag.constraint_name == UNIQUE_CLAIMS_CONSTRAINT:
                return UniqueConflict("a live job already holds this unique key")
            return DatabaseError(f"unique violation on {diag.constraint_name}: {exc}")
        if isinstance(exc, pg_errors.CheckViolation):
            field = column_for_check(diag.constraint_name)
            # The field comes from the constraint's name; the server's message (a
            # function's RAISE names the rule) is shown, never interpreted.
            said = diag.message_primary or ""
            return ValidationError(
                field, f"refused by the database ({diag.constraint_name}): {said}".rstrip(": ")
            )
        if isinstance(exc, pg_errors.NotNullViolation):
            return ValidationError(diag.column_name or "value", "must not be null")
        if isinstance(exc, pg_errors.StringDataRightTruncation | pg_errors.NumericValueOutOfRange):
            return ValidationError(diag.column_name or "value", "is out of range")
        if isinstance(exc, pg_errors.InvalidTextRepresentation):
            # A parameter the server could not read as its type ('abc' for a bigint).
            return ValidationError(
                diag.column_name or "value", f"is not valid input: {diag.message_primary}"
            )
        if sqlstate is None and isinstance(exc, psycopg.DataError):
            # The driver could not send a parameter (text holding NUL): nothing ran.
            return ValidationError("value", f"cannot be sent to the database: {exc}")
        if sqlstate is None and isinstance(exc, psycopg.OperationalError):
            # No server answer to classify: the connection could not be made or was lost.
            return DatabaseError(f"database connection failed: {exc}")
        if sqlstate in _SCHEMA_SQLSTATES:
            return SchemaNotMigrated(f"the awa schema is missing or out of date: {exc}")
        return DatabaseError(f"database error ({sqlstate}): {exc}")
    if isinstance(exc, OSError):
        return DatabaseError(f"database connection failed: {exc}")
    return DatabaseError(str(exc))


def is_unique_claim_violation(exc: BaseException) -> bool:
    return (
        isinstance(exc, pg_errors.UniqueViolation)
        and exc.diag.constraint_name == UNIQUE_CLAIMS_CONSTRAINT
    )


@asynccontextmanager
async def translated_errors() -> AsyncIterator[None]:
    """Re-raise driver errors raised inside the block as domain errors."""
    try:
        yield
    except AwaError:
        raise
    except (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed, OSError) as exc:
        raise map_error(exc) from exc
