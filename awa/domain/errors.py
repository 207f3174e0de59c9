"""The error hierarchy. Every error the product raises on purpose is an ``AwaError``."""

from __future__ import annotations

from typing import Any


class AwaError(Exception):
    """Base class of every Awa error."""


class UniqueConflict(AwaError):
    """An insert collided with a live job holding the same unique key."""

    def __init__(self, message: str = "unique conflict", *, job_id: int | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class SchemaNotMigrated(AwaError):
    """The database schema is missing, older, or newer than this package understands."""


class MigrationChanged(SchemaNotMigrated):
    """A migration the database applied differs from this package's file of that version
    (``file``): the released file was edited, or the version once held another migration."""

    def __init__(self, message: str, *, version: int, file: str) -> None:
        super().__init__(message)
        self.version = version
        self.file = file


class AdoptionRefused(SchemaNotMigrated):
    """A database awa-pg migrated cannot be adopted yet: something still uses it (its
    ``runtimes`` that heartbeat, unfinished batch operations, objects outside its schema)
    or it is in a state adoption does not take. Nothing was changed."""

    def __init__(self, message: str, *, runtimes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.runtimes = runtimes


class UnknownJobKind(AwaError):
    """A claimed job has a kind with no registered handler."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"unknown job kind: {kind}")
        self.kind = kind


class SerializationError(AwaError):
    """Job arguments or metadata could not be (de)serialized."""


class ValidationError(AwaError, ValueError):
    """Bad input, refused before anything was written. ``field`` names the offending input."""

    def __init__(self, field: str, message: str, *, value: Any = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.value = value


class ValidationTypeError(ValidationError, TypeError):
    """Input of the wrong type. Also a ``TypeError``, so callers catching either match."""


class ValidationOverflowError(ValidationError, OverflowError):
    """A number out of the representable range. Also an ``OverflowError``."""


class TerminalError(AwaError):
    """Raised by a handler to fail the job without retrying it."""


class DatabaseError(AwaError):
    """A database operation failed (or the client is closed)."""


class JobNotFound(AwaError):
    """No job with this id, or none in a state the call applies to: it never existed, or it
    finished and retention removed it (on queue storage a completed job is reclaimed
    within minutes, ``docs/storage.md``). ``job_id`` names it; code catching ``AwaError``
    catches it too."""

    def __init__(self, job_id: int, *, hint: str | None = None) -> None:
        super().__init__(f"job not found: {job_id}" + ("" if hint is None else f": {hint}"))
        self.job_id = job_id


class ConnectionLimitTooLow(DatabaseError):
    """A worker would need more connections than a Postgres connection limit allows;
    ``needed`` is the worker's budget, ``limit`` the limit and ``scope`` what it applies
    to (a role, a database or the server)."""

    def __init__(self, message: str, *, needed: int, limit: int, scope: str) -> None:
        super().__init__(message)
        self.needed = needed
        self.limit = limit
        self.scope = scope


class WakeupsUnavailable(DatabaseError):
    """Notifications cannot reach this connection (a pooler in transaction mode hands
    the session that ran ``LISTEN`` to other clients): wake-ups come from polling.
    Subscribing again will not help; ``reason`` says what was found."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallbackNotFound(AwaError):
    """No job is waiting on the given callback id."""


class IllegalTransition(AwaError):
    """A state change that the transition table does not allow."""

    def __init__(self, *, old: str, new: str) -> None:
        super().__init__(f"illegal job state transition: {old} -> {new}")
        self.old = old
        self.new = new
