"""The public ``Job`` object: a read-only view of a job, plus attempt controls in handlers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from awa.domain.batches import BatchCounts
from awa.domain.callbacks import CallbackExpressions
from awa.domain.errors import (
    AwaError,
    ValidationOverflowError,
    ValidationTypeError,
)
from awa.domain.flow_control import refuse_key_update
from awa.domain.handler_results import CallbackToken
from awa.domain.held_back import HeldBack
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.domain.unique_conflict import InsertOutcome, insert_outcome
from awa.entrypoints.cel import compile_expressions

T = TypeVar("T")
# The widest percent accepted (a byte); anything above 100 is reported as 100.
_MAX_PERCENT_INPUT = 255


class AttemptControls(Protocol):
    """What a running attempt offers its handler (implemented by the worker runtime)."""

    def is_cancelled(self) -> bool: ...

    def set_progress(self, percent: int, message: str | None = None) -> None: ...

    def update_metadata(self, updates: dict[str, Any]) -> None: ...

    async def flush_progress(self) -> None: ...

    def flush_progress_sync(self) -> None: ...

    @property
    def progress(self) -> dict[str, Any] | None: ...

    async def register_callback(
        self, timeout_seconds: float = 3600.0, expressions: CallbackExpressions | None = None
    ) -> CallbackToken: ...

    async def wait_for_callback(self, token: CallbackToken) -> Any: ...

    @property
    def parent_results(self) -> dict[int, Any]: ...

    @property
    def batch(self) -> BatchCounts | None: ...


def rfc3339(value: datetime | None) -> str | None:
    """An aware datetime as RFC 3339 text (``+00:00`` offset form), or ``None``."""
    return None if value is None else value.isoformat()


_NOT_RUNNING = "this job is not running in a worker; attempt controls are unavailable"


class Job(Generic[T]):
    """A job snapshot. Inside a handler it also controls the running attempt:
    cancellation checks, progress, metadata and external callbacks."""

    __slots__ = ("_args", "_controls", "_held_back", "_record")

    def __init__(
        self,
        record: JobRecord,
        args: Any = None,
        controls: AttemptControls | None = None,
        held_back: HeldBack | None = None,
    ) -> None:
        self._record = record
        self._args = record.args if args is None else args
        self._controls = controls
        self._held_back = held_back

    # ------------------------------------------------------------------ properties
    @property
    def record(self) -> JobRecord:
        """The underlying storage snapshot (internal; not part of the documented API)."""
        return self._record

    @property
    def id(self) -> int:
        """The job's id (``bigint``), unique in the database."""
        return self._record.id

    @property
    def parent_results(self) -> dict[int, Any]:
        """Inside a handler: the stored results of the jobs this one depends on
        (``depends_on``), by parent id, read when the attempt started. Each is rebuilt
        as the type the parent's task returns (its handler's return annotation, when
        that task is registered in this process and returns a dataclass, attrs class or
        pydantic model), else the JSON value. A parent with no stored result (its task
        stores none, it did not complete, or the retention passed) is absent. Empty
        outside a handler and for a job without parents."""
        if self._controls is None:
            return {}
        return dict(self._controls.parent_results)

    @property
    def batch(self) -> BatchCounts | None:
        """Inside the handler of a batch's callback (``awa.Batch``): how the batch's jobs
        ended (``size``, ``completed``, ``failed``, ``cancelled``; ``pending`` is 0), read
        when the attempt started. ``None`` for any other job and outside a handler."""
        if self._controls is None:
            return None
        return self._controls.batch

    @property
    def held_back(self) -> HeldBack | None:
        """From ``get_job``/``list_jobs``: why this available job is not being claimed
        now, when a limit holds it back (ADR 0029): its key has every slot of
        ``max_running_per_key`` held, or the queue's or its key's fleet-wide rate limiter
        admits nothing until ``next_admission``. ``None`` when nothing holds it back, for
        any other state, and on jobs returned elsewhere (inserts, handlers)."""
        return self._held_back

    @property
    def kind(self) -> str:
        """The job kind: the handler it runs (by default derived from the args class name)."""
        return self._record.kind

    @property
    def queue(self) -> str:
        """The queue it was enqueued on."""
        return self._record.queue

    @property
    def state(self) -> JobState:
        """Where it is in its lifecycle (``JobState``), as of this snapshot."""
        return self._record.state

    @property
    def priority(self) -> int:
        """1 (most urgent) to 4, as enqueued; priority aging works on claim order only."""
        return self._record.priority

    @property
    def attempt(self) -> int:
        """How many attempts have started (0 before the first)."""
        return self._record.attempt

    @property
    def max_attempts(self) -> int:
        """Attempts allowed before a retryable failure becomes ``failed``."""
        return self._record.max_attempts

    @property
    def tags(self) -> list[str]:
        """Free-form labels given at enqueue (searchable in the admin UI)."""
        return list(self._record.tags)

    @property
    def args(self) -> T:
        """The job's arguments: inside a handler, an instance of the registered args class;
        on the job ``insert()`` returned, the instance given; read back (``get_job``,
        ``list_jobs``), the stored JSON."""
        return self._args  # type: ignore[no-any-return]

    @property
    def metadata(self) -> dict[str, Any]:
        """The job's metadata: what was given at enqueue plus handler checkpoints."""
        return dict(self._record.metadata)

    @property
    def insert_outcome(self) -> InsertOutcome:
        """What the insert that returned this job did (ADR 0034): ``"inserted"`` (a new
        job), or ``"replaced"`` / ``"debounced"`` when a waiting job holding the same
        unique key took the insert (``unique_opts={"on_conflict": ...}``). On a job read
        later it tells whether the job ever absorbed a later insert."""
        return insert_outcome(self._record.metadata)

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` stored at enqueue (``metadata["awa:traceparent"]``),
        or ``None``. Inside a handler the execution span is already the ambient context;
        this is the enqueue site's, for inspection."""
        # Imported here: the tracing module loads opentelemetry, which a process that
        # only lists jobs (the command line) does not need.
        from awa.runtime.tracing import TRACEPARENT_KEY

        value = self._record.metadata.get(TRACEPARENT_KEY)
        return value if isinstance(value, str) else None

    @property
    def errors(self) -> list[dict[str, Any]]:
        """One entry per failed attempt, oldest first: ``error``, ``attempt``, ``at`` (and
        ``terminal`` when it ended the job)."""
        return [dict(e) for e in self._record.errors]

    @property
    def run_at(self) -> str:
        """When it is due (ISO 8601): now for available jobs, later when scheduled."""
        return self._record.run_at.isoformat()

    @property
    def deadline(self) -> str | None:
        """When the running attempt's deadline passes (RFC 3339), or ``None``."""
        return rfc3339(self._record.deadline_at)

    @property
    def created_at(self) -> str:
        """When it was enqueued (ISO 8601)."""
        return self._record.created_at.isoformat()

    @property
    def finalized_at(self) -> str | None:
        """When it completed, failed or was cancelled (RFC 3339), or ``None``."""
        return rfc3339(self._record.finalized_at)

    @property
    def progress(self) -> dict[str, Any] | None:
        """The last reported progress (``percent``, ``message``, ``metadata``) or ``None``;
        cleared when the job completes. Inside a handler: including changes not yet
        flushed."""
        if self._controls is not None:
            return self._controls.progress
        return None if self._record.progress is None else dict(self._record.progress)

    # ------------------------------------------------------------------ attempt controls
    def _require(self) -> AttemptControls:
        if self._controls is None:
            raise AwaError(_NOT_RUNNING)
        return self._controls

    def is_cancelled(self) -> bool:
        """True once the attempt was cancelled (operator cancel, rescue or shutdown)."""
        return self._controls.is_cancelled() if self._controls is not None else False

    def set_progress(self, percent: int, message: str | None = None) -> None:
        """Buffer progress; flushed with heartbeats or ``flush_progress``.

        ``percent`` is an int from 0 to 255, and values over 100 count as 100. Outside
        that range it raises an error that is both ``ValueError`` and ``OverflowError``.
        """
        if isinstance(percent, bool) or not isinstance(percent, int):
            raise ValidationTypeError(
                "percent", f"{type(percent).__name__!r} object cannot be interpreted as an integer"
            )
        if not 0 <= percent <= _MAX_PERCENT_INPUT:
            raise ValidationOverflowError(
                "percent",
                "out of range integral type conversion attempted: percent must be between "
                f"0 and 100 (up to {_MAX_PERCENT_INPUT} is taken as 100), got {percent}",
            )
        self._require().set_progress(min(percent, 100), message)

    def update_metadata(self, updates: dict[str, Any]) -> None:
        """Buffer a shallow merge of ``updates`` into the job's metadata."""
        if not isinstance(updates, dict):
            raise ValidationTypeError(
                "updates", f"update_metadata requires a dict, got {type(updates).__name__}"
            )
        refuse_key_update(updates)
        self._require().update_metadata(updates)

    async def flush_progress(self) -> None:
        """Persist buffered progress and metadata now."""
        await self._require().flush_progress()

    def flush_progress_sync(self) -> None:
        """Blocking ``flush_progress`` for plain ``def`` handlers."""
        self._require().flush_progress_sync()

    async def register_callback(
        self,
        timeout_seconds: float = 3600.0,
        filter: str | None = None,
        on_complete: str | None = None,
        on_fail: str | None = None,
        transform: str | None = None,
    ) -> CallbackToken:
        """Register an external callback for this attempt and return its token.

        ``filter``, ``on_complete``, ``on_fail`` and ``transform`` are CEL expressions over
        the variable ``payload``, used by ``resolve_callback``; each is checked here (a
        syntax error or another variable raises ``ValidationError``).
        """
        expressions = compile_expressions(
            filter=filter, on_complete=on_complete, on_fail=on_fail, transform=transform
        )
        return await self._require().register_callback(
            timeout_seconds, None if expressions.is_empty else expressions
        )

    async def wait_for_callback(self, token: CallbackToken) -> Any:
        """Suspend until the callback is resumed; returns the resume payload."""
        return await self._require().wait_for_callback(token)

    def __repr__(self) -> str:
        return (
            f"Job(id={self.id}, kind={self.kind!r}, queue={self.queue!r}, "
            f"state={self.state.name}, attempt={self.attempt})"
        )
