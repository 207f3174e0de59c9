"""The shared base of the model-vs-real machine: the engine pair, the id mapping and the
comparison helpers every family of rules uses.

The machine (``ModelVsReal`` in ``test_model_vs_real.py``) is assembled from rule mixins,
each a subclass of :class:`MachineBase` in a module of its own (``_mvr_reads``,
``_mvr_ops``, ...); Hypothesis collects the rules of every base class. A new family of
rules is one more mixin named among ``ModelVsReal``'s bases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant

from awa.domain.callbacks import CallbackExpressions
from awa.domain.dependencies import PARENTS_METADATA
from awa.domain.errors import AwaError
from awa.domain.job import Claim, DlqEntry, JobRecord, JobSpec, QueueCounts, RunLease
from awa.domain.states import JobState
from awa.ports.storage import JobFilter, Rescued, StorageEngine
from tests.support.engines import EngineHandle

T = TypeVar("T")
S = TypeVar("S")

QUEUES = ("alpha", "beta")
KINDS = ("send", "bill")
UNIQUE_KEYS = (b"u-1", b"u-2")

#: The CEL expressions a parked callback may carry (``callback_expressions`` reads them).
EXPRESSIONS = (
    None,
    CallbackExpressions(),
    CallbackExpressions(filter="payload.ok", on_complete="payload.done == true"),
    CallbackExpressions(on_fail="payload.error != ''", transform="payload.value"),
)

delays = st.sampled_from([0.5, 1.0, 5.0, 30.0, 61.0, 200.0])


@attrs.frozen
class Outcome:
    """What one engine answered: a normalized value, or the type of error it raised."""

    value: Any = None
    error: str | None = None


class Pair:
    """The model and the real engine, driven through one event loop and one clock."""

    def __init__(self, runner: asyncio.Runner, model: EngineHandle, real: EngineHandle) -> None:
        self.runner = runner
        self.model = model
        self.real = real
        self.clock = model.clock
        self.real_to_model: dict[int, int] = {}
        #: Readings that hold for the whole test (kept across examples), by name.
        self.fixed: dict[str, Any] = {}

    def run(self, op: Callable[[StorageEngine], Awaitable[T]]) -> tuple[Outcome, Outcome]:
        return self._call(self.model.engine, op), self._call(self.real.engine, op)

    def run_handles(self, op: Callable[[EngineHandle], Awaitable[T]]) -> tuple[Outcome, Outcome]:
        """As :meth:`run`, given each side's whole handle (its engine and control plane)."""
        return self._call(self.model, op), self._call(self.real, op)

    def _call(self, target: S, op: Callable[[S], Awaitable[T]]) -> Outcome:
        try:
            return Outcome(value=self.runner.run(_await(op(target))))
        except AwaError as exc:
            return Outcome(error=type(exc).__name__)

    def on_real(self, awaitable: Awaitable[T]) -> T:
        """Run one call of the real engine alone (what the model has no counterpart for)."""
        return self.runner.run(_await(awaitable))


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _normalize_job(job: JobRecord, id_map: Callable[[int], int]) -> dict[str, Any]:
    data = attrs.asdict(job, recurse=False)
    data["id"] = id_map(job.id)
    data["errors"] = list(job.errors)
    data["tags"] = list(job.tags)
    parents = job.metadata.get(PARENTS_METADATA)
    if parents is not None:
        # a child's parents by id (ADR 0032): each side names its own ids
        data["metadata"] = {**job.metadata, PARENTS_METADATA: [id_map(i) for i in parents]}
    return data


def job_specs(
    *,
    kind: str,
    queue: str,
    priority: int,
    max_attempts: int,
    run_at: Any,
    unique: bytes | None,
    count: int,
) -> list[JobSpec]:
    """``count`` specs of one shape; the first carries ``unique``, odd ones tag ``t``."""
    return [
        JobSpec(
            kind=kind,
            queue=queue,
            args={"n": index},
            priority=priority,
            max_attempts=max_attempts,
            run_at=run_at,
            unique_key=unique if index == 0 else None,
            tags=("t",) if index % 2 else (),
        )
        for index in range(count)
    ]


@attrs.frozen
class Held:
    """Whether the model holds a failed job, a job with a unique key, a DLQ entry."""

    failed: bool = False
    unique: bool = False
    dlq: bool = False


class MachineBase(RuleBasedStateMachine):
    """The pair under test, what the machine has handed out so far, and the helpers that
    apply one operation to both engines and compare the normalized answers."""

    pair: Pair  # set on the subclass built per test

    def __init__(self) -> None:
        super().__init__()
        self.p = self.pair
        self.p.runner.run(self.p.model.engine.reset())
        self.p.runner.run(self.p.real.engine.reset())
        self.p.real_to_model.clear()
        self.model_ids: list[int] = []
        # (model lease, real lease) of every attempt ever claimed, live or stale
        self.leases: list[tuple[RunLease, RunLease]] = []
        # callback ids ever registered (resolving a settled one must fail alike)
        self.callbacks: list[str] = []
        self.held = Held()

    @invariant()
    def remember_what_the_model_holds(self) -> None:
        """Not a comparison: what the model holds after the step, so that the rules which
        act on failed jobs, DLQ entries or unique keys are enabled only when there is
        one (a cheap precondition) and leave the steps to the rules that get there."""
        model = self.p.model.engine
        jobs = self.p.runner.run(_await(model.list_jobs(JobFilter(), limit=100_000)))
        self.held = Held(
            failed=any(job.state == JobState.Failed for job in jobs),
            unique=any(job.unique_key is not None for job in jobs),
            dlq=self.p.runner.run(_await(model.dlq_depth())) > 0,
        )

    # ------------------------------------------------------------------ ids
    def _mid(self, real_id: int) -> int:
        return self.p.real_to_model.get(real_id, -real_id)

    def _real_id(self, model_id: int) -> int:
        for real, model in self.p.real_to_model.items():
            if model == model_id:
                return real
        raise AssertionError(f"unknown model id {model_id}")

    def _map_jobs(self, model_jobs: list[JobRecord], real_jobs: list[JobRecord]) -> None:
        """Pair the ids of jobs the two engines just inserted (in the same order)."""
        for model_job, real_job in zip(model_jobs, real_jobs, strict=True):
            self.p.real_to_model[real_job.id] = model_job.id
            self.model_ids.append(model_job.id)

    # ------------------------------------------------------------------ comparison
    def _norm(self, value: Any, real: bool) -> Any:
        ident: Callable[[int], int] = self._mid if real else (lambda i: i)
        if isinstance(value, JobRecord):
            return _normalize_job(value, ident)
        if isinstance(value, Claim):
            return (
                _normalize_job(value.job, ident),
                (ident(value.lease.job_id), value.lease.lease),
                value.deadline_at,
            )
        if isinstance(value, DlqEntry):
            return (
                _normalize_job(value.job, ident),
                value.reason,
                value.dlq_at,
                value.original_run_lease,
            )
        if isinstance(value, Rescued):
            return ((ident(value.lease.job_id), value.lease.lease), value.new_state, value.reason)
        if isinstance(value, QueueCounts):
            return attrs.asdict(value, recurse=False)
        if isinstance(value, list | tuple):
            return [self._norm(item, real) for item in value]
        return value

    def _same(
        self, op: Callable[[StorageEngine], Awaitable[Any]], *, label: str
    ) -> tuple[Outcome, Outcome]:
        model, real = self.p.run(op)
        self._assert_same(model, real, label=label)
        return model, real

    def _assert_same(self, model: Outcome, real: Outcome, *, label: str) -> None:
        model_view = Outcome(self._norm(model.value, False), model.error)
        real_view = Outcome(self._norm(real.value, True), real.error)
        assert model_view == real_view, f"{label}: model={model_view!r} real={real_view!r}"

    # ------------------------------------------------------------------ drawing
    def _lease_pair(self, data: st.DataObject) -> tuple[RunLease, RunLease]:
        return data.draw(st.sampled_from(self.leases), label="lease")

    def _guarded(
        self,
        data: st.DataObject,
        label: str,
        call: Callable[[StorageEngine, RunLease], Awaitable[Any]],
    ) -> None:
        model_lease, real_lease = self._lease_pair(data)
        leases = iter((model_lease, real_lease))
        self._same(lambda engine: call(engine, next(leases)), label=label)

    def _by_id(
        self,
        data: st.DataObject,
        label: str,
        call: Callable[[StorageEngine, int], Awaitable[Any]],
    ) -> None:
        model_id = data.draw(st.sampled_from(self.model_ids), label="job")
        ids = iter((model_id, self._real_id(model_id)))
        self._same(lambda engine: call(engine, next(ids)), label=label)
