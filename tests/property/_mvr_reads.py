"""Model-vs-real rules for the admin reads: single jobs and DLQ entries, the metrics and
dashboard views, callback expressions, and the transition observation of the engines
that follow the storage transition."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from awa.domain.admin_views import DEPTH_STATES, QueueDepth
from awa.domain.job import JobRecord
from awa.domain.states import JobState
from awa.domain.transition import (
    TransitionObservation,
    backlog_matters,
    producers_use_queue_storage,
)
from awa.ports.storage import JobFilter, TransitionObserver
from tests.property._mvr_base import QUEUES, MachineBase, _await

#: Engines whose ``queue_depths`` count available jobs as lane head-cursor differences
#: (queue storage, alone or behind the routing engine): a job retired above a cursor is
#: counted until a claim passes it, so their available count may exceed the exact one
#: (``StorageEngine.queue_depths``). Every other engine's depths are exact.
CURSOR_DEPTHS = frozenset(
    {
        "postgres_queue_storage",
        "queue_storage_two_slot_ring",
        "routing_mixed",
        "routing_queue_storage",
    }
)

DepthView = dict[str, tuple[dict[str, int], datetime | None]]


def _depth_view(depths: list[QueueDepth]) -> DepthView:
    """Depths by queue: every depth state counted, plus the oldest available run_at. A
    queue with no live job may be reported with zero counts or left out: both read as
    absent."""
    view: DepthView = {}
    for depth in depths:
        counts = {state.sql_name: depth.count(state) for state in DEPTH_STATES}
        if any(counts.values()) or depth.oldest_available_at is not None:
            view[depth.queue] = (counts, depth.oldest_available_at)
    return view


class ReadRules(MachineBase):
    """Reads change nothing: the state invariants after each of them hold the engines to
    that as well."""

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def read_job(self, data: st.DataObject) -> None:
        """One id, read as a job and as a DLQ entry (at most one of them exists)."""
        model_id = data.draw(st.sampled_from(self.model_ids), label="job")
        real_id = self._real_id(model_id)
        ids = iter((model_id, real_id))
        self._same(lambda engine: engine.get_job(next(ids)), label="get_job")
        ids = iter((model_id, real_id))
        self._same(lambda engine: engine.get_dlq(next(ids)), label="get_dlq")

    @rule(
        window=st.sampled_from([60.0, 600.0, 7200.0]),
        queue=st.none() | st.sampled_from(QUEUES),
    )
    def read_views(self, window: float, queue: str | None) -> None:
        """The dashboard and metrics reads: per-kind totals, finalizations per minute,
        DLQ depths and the cheap queue depths."""
        self._same(lambda engine: engine.kind_counts(), label="kind_counts")
        span = timedelta(seconds=window)
        self._same(
            lambda engine: engine.finalized_timeseries(window=span), label="finalized_timeseries"
        )
        self._same(lambda engine: engine.dlq_depth(queue), label=f"dlq_depth {queue}")
        self._same(lambda engine: engine.dlq_depth_by_queue(), label="dlq_depth_by_queue")
        self._same(lambda engine: engine.dlq_depth_by_kind(), label="dlq_depth_by_kind")
        model, real = self.p.run(lambda engine: engine.queue_depths())
        assert model.error is None and real.error is None, (model.error, real.error)
        self._check_depths(_depth_view(model.value), _depth_view(real.value))

    def _check_depths(self, exact: DepthView, read: DepthView) -> None:
        if self.p.real.name not in CURSOR_DEPTHS:
            assert read == exact, f"queue_depths: model={exact!r} real={read!r}"
            return
        # Available may count rows retired above a cursor and the oldest is each lane's
        # first row's; the other states are exact (StorageEngine.queue_depths).
        due: dict[str, set[datetime]] = {}
        for job in self._model_jobs():
            if job.state == JobState.Available:
                due.setdefault(job.queue, set()).add(job.run_at)
        for queue in sorted(set(exact) | set(read)):
            model_counts, model_oldest = exact.get(queue, ({}, None))
            real_counts, real_oldest = read.get(queue, ({}, None))
            for state in DEPTH_STATES:
                name = state.sql_name
                model_n, real_n = model_counts.get(name, 0), real_counts.get(name, 0)
                label = f"queue_depths {queue} {name}: model={model_n} real={real_n}"
                if name == "available":
                    assert real_n >= model_n, label
                else:
                    assert real_n == model_n, label
            if real_counts.get("available", 0) == model_counts.get("available", 0):
                label = f"queue_depths {queue} oldest: model={model_oldest} real={real_oldest}"
                if model_oldest is None:
                    assert real_oldest is None, label
                else:
                    assert real_oldest in due.get(queue, set()), label
                    assert real_oldest >= model_oldest, label

    @precondition(lambda self: bool(self.callbacks))
    @rule(data=st.data())
    def read_callback_expressions(self, data: st.DataObject) -> None:
        callback = data.draw(st.sampled_from(self.callbacks), label="callback")
        self._same(
            lambda engine: engine.callback_expressions(callback), label="callback_expressions"
        )

    @precondition(lambda self: isinstance(self.p.real.engine, TransitionObserver))
    @rule()
    def observe_transition(self) -> None:
        """The model follows no transition, so what is compared is what the machine
        implies: no rule takes a transition step, so the status is the one first
        observed; the canonical backlog is read exactly while it gates a step, and then
        counts the unfinished jobs held on canonical storage: none once producers write
        to queue storage (every job of the machine was inserted there), else every
        unfinished job. Live runtimes follow the wall clock and are not compared."""
        real = self.p.real.engine
        assert isinstance(real, TransitionObserver)
        seen = self.p.on_real(real.observe_transition())
        first: TransitionObservation = self.p.fixed.setdefault("observation", seen)
        assert seen.status == first.status, f"status moved: {first.status} -> {seen.status}"
        assert seen.schema_installed == first.schema_installed
        state = seen.status.state
        if not backlog_matters(state):
            assert seen.canonical_backlog is None, seen
            return
        expected = 0
        if not producers_use_queue_storage(state):
            expected = sum(1 for job in self._model_jobs() if not job.state.is_terminal)
        assert seen.canonical_backlog == expected, (
            f"canonical backlog {seen.canonical_backlog}, expected {expected}"
        )

    def _model_jobs(self) -> list[JobRecord]:
        jobs: Any = self.p.runner.run(
            _await(self.p.model.engine.list_jobs(JobFilter(), limit=100_000))
        )
        return list(jobs)
