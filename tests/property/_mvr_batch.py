"""Model-vs-real rules for batch operations: the targets, the per-job change and the
control records, driven through the life cycle the maintenance leader's runner follows
(``awa.runtime.batch_runner``): submit -> claim (``next_batch_operation``) -> scan pages of
targets into items -> start running -> chunks of pending items, each change applied and
recorded -> finish; plus cancel, purge, reads and bad input at any point.

Each engine draws its own random UUID for an operation, so real operation ids are mapped
to model ids in submit order, as job ids are. The id is also the tie-break of the
``(submitted_at, id)`` and ``(finalized_at, id)`` orders, the one place two engines may
rightly disagree; submitting and finishing therefore tick the shared clock by a
microsecond, so no two operations share either instant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from awa.domain.batch_ops import (
    DEFAULT_RETENTION,
    FINAL_STATES,
    BatchFilter,
    BatchOperation,
    BatchOpState,
    BatchSpec,
    ItemOutcome,
    ItemResult,
    final_state,
    parse_filter,
    parse_spec,
)
from awa.domain.job import JobRecord
from tests.property._mvr_base import KINDS, QUEUES, Outcome, Pair
from tests.support.engines import EngineHandle, forget_control_plane

TICK = timedelta(microseconds=1)
#: Runner ids as the leader passes them (a runtime's UUID, or the default empty id) and
#: as a caller might: another spelling of a UUID, or no UUID at all.
RUNNERS = (
    "00000000-0000-4000-8000-000000000001",
    "00000000-0000-4000-8000-0000000000AB",
    "",
    "runner-1",
)
RETENTIONS = (timedelta(0), timedelta(seconds=30), DEFAULT_RETENTION)
#: Strings that are no operation id at all.
MALFORMED_IDS = ("not-an-id", "")


@attrs.define
class BatchRef:
    """One submitted operation: its id on each engine, the filter and spec each stored,
    and what the model says about it (its state, the items the scans added)."""

    model: str
    real: str
    filters: tuple[BatchFilter, BatchFilter]
    spec: BatchSpec
    state: BatchOpState = BatchOpState.PENDING
    purged: bool = False
    #: model job ids snapshotted into the operation's items
    items: set[int] = attrs.Factory(set)
    #: the scan's ``after_id`` on each engine (model, real)
    scan_after: tuple[int, int] = (0, 0)

    def pick(self, real: bool) -> str:
        return self.real if real else self.model


@attrs.define
class BatchBook:
    """The batch operations an example has submitted."""

    ops: list[BatchRef] = attrs.Factory(list)
    real_to_model: dict[str, str] = attrs.Factory(dict)

    def live(self, *states: BatchOpState) -> list[BatchRef]:
        return [ref for ref in self.ops if not ref.purged and (not states or ref.state in states)]


class BatchMachine(Protocol):
    """What these rules need of the model-vs-real machine."""

    p: Pair
    model_ids: list[int]
    batch: BatchBook

    def _mid(self, real_id: int) -> int: ...

    def _real_id(self, model_id: int) -> int: ...

    def _norm(self, value: Any, real: bool) -> Any: ...


def forget_batch_operations(pair: Pair) -> None:
    """Start an example with no batch operation on either side (``reset`` keeps them):
    each side's control plane is emptied (:func:`forget_control_plane`)."""
    for handle in (pair.model, pair.real):
        pair.runner.run(forget_control_plane(handle.control, pair.clock))


# ---------------------------------------------------------------------- normalizing
def _norm(m: BatchMachine, value: Any, real: bool) -> Any:
    """Real job and operation ids mapped to the model's; everything else as answered."""
    job_id: Callable[[int], int] = m._mid if real else (lambda i: i)

    def op_id(op: str) -> str:
        return m.batch.real_to_model.get(op, f"unmapped {op}") if real else op

    if isinstance(value, BatchOperation):
        data = attrs.asdict(value, recurse=False)
        data["id"] = op_id(value.id)
        ids = value.filter.ids
        data["filter"] = attrs.evolve(
            value.filter, ids=None if ids is None else tuple(job_id(i) for i in ids)
        )
        data["cursor"] = _norm_cursor(value.cursor, job_id)
        return data
    if isinstance(value, ItemResult):
        return (job_id(value.job_id), value.outcome, value.error)
    if isinstance(value, JobRecord):
        return m._norm(value, real)
    if isinstance(value, list | tuple):
        return [_norm(m, item, real) for item in value]
    return value


def _norm_cursor(
    cursor: dict[str, Any] | None, job_id: Callable[[int], int]
) -> dict[str, Any] | None:
    if cursor is None:
        return None
    return {
        key: job_id(val) if isinstance(val, int) and val > 0 else val for key, val in cursor.items()
    }


def _job_ids(m: BatchMachine, ids: Any, real: bool) -> Any:
    return [m._mid(i) for i in ids] if real and isinstance(ids, list) else ids


def _same(
    m: BatchMachine,
    op: Callable[[EngineHandle, bool], Awaitable[Any]],
    *,
    label: str,
    norm: Callable[[Any, bool], Any] | None = None,
) -> tuple[Outcome, Outcome]:
    """Run ``op(handle, is_real)`` on both engines (with their batch-operation stores) and
    require the same answer."""
    sides = iter((False, True))
    model, real = m.p.run_handles(lambda handle: op(handle, next(sides)))
    view = norm or (lambda value, is_real: _norm(m, value, is_real))
    model_view = (view(model.value, False), model.error)
    real_view = (view(real.value, True), real.error)
    assert model_view == real_view, f"{label}: model={model_view!r} real={real_view!r}"
    _note(m, model.value)
    return model, real


def _note(m: BatchMachine, value: Any) -> None:
    """Follow the model's view of the operations it answered with."""
    values = value if isinstance(value, list | tuple) else [value]
    by_id = {ref.model: ref for ref in m.batch.ops}
    for item in values:
        if isinstance(item, BatchOperation) and item.id in by_id:
            by_id[item.id].state = item.state


def _refresh(m: BatchMachine) -> None:
    """Re-read every operation's state (and whether it still exists) from the model."""

    async def listed_ops() -> list[BatchOperation]:
        return await m.p.model.control.batch_operations.list_batch_operations(limit=100_000)

    listed = m.p.runner.run(listed_ops())
    states = {op.id: op.state for op in listed}
    for ref in m.batch.ops:
        if ref.model in states:
            ref.state = states[ref.model]
        else:
            ref.purged = True


def _settle(m: BatchMachine, *touched: BatchRef) -> None:
    """After a rule that may write control records: every operation, and the pending items
    of those it touched, are the same on both engines (only these rules write them)."""
    _same(
        m,
        lambda h, real: h.control.batch_operations.list_batch_operations(limit=100_000),
        label="batch operations",
    )
    for ref in {id(ref): ref for ref in touched}.values():
        _same_pending(m, ref, limit=100_000)


def _same_pending(m: BatchMachine, ref: BatchRef, *, limit: int) -> None:
    _same(
        m,
        lambda h, real: h.control.batch_operations.pending_batch_items(ref.pick(real), limit=limit),
        label="pending items",
        norm=lambda ids, real: _job_ids(m, ids, real),
    )


# ---------------------------------------------------------------------- drawing
def _draw_filter(m: BatchMachine, data: st.DataObject) -> tuple[BatchFilter, BatchFilter]:
    """A filter as the client builds it (``parse_filter`` of a JSON-like dict), once with
    model job ids and once with the same jobs' real ids."""
    now = m.p.clock.now()
    moments = st.none() | st.sampled_from([1.0, 30.0, 300.0]).map(
        lambda back: now - timedelta(seconds=back)
    )
    raw: dict[str, Any] = {
        "kind": data.draw(st.none() | st.sampled_from(KINDS), label="kind"),
        "queue": data.draw(st.none() | st.sampled_from(QUEUES), label="queue"),
        "tag": data.draw(st.none() | st.just("t"), label="tag"),
        "state": data.draw(st.none() | st.sampled_from(["available", "scheduled"]), label="state"),
        "created_at_gte": data.draw(moments, label="created_at_gte"),
        "created_at_lt": data.draw(moments, label="created_at_lt"),
    }
    ids = None
    if m.model_ids:
        ids = data.draw(st.none() | st.lists(st.sampled_from(m.model_ids), max_size=4), label="ids")
    model = parse_filter({**raw, "ids": ids})
    real = parse_filter({**raw, "ids": None if ids is None else [m._real_id(i) for i in ids]})
    return model, real


specs = st.one_of(
    st.integers(1, 4).map(lambda p: parse_spec("set_priority", {"priority": p})),
    st.tuples(st.sampled_from(QUEUES), st.none() | st.integers(1, 4)).map(
        lambda qp: parse_spec("move_queue", {"queue": qp[0], "priority": qp[1]})
    ),
)


def _draw_ref(data: st.DataObject, refs: Sequence[BatchRef]) -> BatchRef:
    return data.draw(st.sampled_from(list(refs)), label="operation")


def _finish(
    m: BatchMachine,
    ref: BatchRef,
    state: BatchOpState,
    *,
    last_error: str | None,
    retention: timedelta,
    label: str,
) -> None:
    m.p.clock.advance(TICK)
    _same(
        m,
        lambda h, real: h.control.batch_operations.finish_batch_operation(
            ref.pick(real), state=state, last_error=last_error, retention=retention
        ),
        label=label,
    )


def _scan_page(m: BatchMachine, ref: BatchRef, *, limit: int, rescan: bool) -> None:
    """One page of targets snapshotted into the items (``BatchRunner._scan``); after the
    last page, or once a cancel has arrived, the operation starts running."""
    if rescan:
        ref.scan_after = (0, 0)

    async def page(h: EngineHandle, real: bool) -> tuple[list[JobRecord], BatchOperation | None]:
        found = await h.engine.list_batch_targets(
            ref.filters[real], after_id=ref.scan_after[real], limit=limit
        )
        if not found:
            return found, None
        return found, await h.control.batch_operations.add_batch_items(
            ref.pick(real), [job.id for job in found]
        )

    model, real = _same(m, page, label="scan")
    found, added = model.value
    if found:
        ref.scan_after = (found[-1].id, real.value[0][-1].id)
        ref.items.update(job.id for job in found)
    if len(found) < limit or (added is not None and added.state == BatchOpState.CANCELLING):
        _same(
            m,
            lambda h, real: h.control.batch_operations.start_batch_running(
                ref.pick(real), cursor={"after_job_id": 0, "max_job_id": ref.scan_after[real]}
            ),
            label="start running",
        )


def _chunk(m: BatchMachine, ref: BatchRef, *, limit: int, retention: timedelta) -> None:
    """One turn of the runner's loop: the next chunk of pending items (none unless
    running), finished at a chunk boundary, or each change applied and the outcomes
    recorded."""
    ids: list[int] = []
    if ref.state == BatchOpState.RUNNING:
        model, _ = _same(
            m,
            lambda h, real: h.control.batch_operations.pending_batch_items(
                ref.pick(real), limit=limit
            ),
            label="chunk: pending items",
            norm=lambda ids, real: _job_ids(m, ids, real),
        )
        ids = list(model.value)
    done = final_state(ref.state, items_left=bool(ids))
    if done is not None:
        _finish(m, ref, done, last_error=None, retention=retention, label="chunk: finish")
        return
    results: tuple[list[ItemResult], list[ItemResult]] = ([], [])
    for job_id in ids:
        for side, result in enumerate(_apply_one(m, ref, job_id)):
            results[side].append(result)
    max_ids = ref.scan_after
    last = (ids[-1], m._real_id(ids[-1]))
    _same(
        m,
        lambda h, real: h.control.batch_operations.record_batch_items(
            ref.pick(real),
            results[real],
            cursor={"after_job_id": last[real], "max_job_id": max_ids[real]},
        ),
        label="chunk: record",
    )


class BatchRules:
    """The batch-operation rules (a mixin of the model-vs-real machine)."""

    # ------------------------------------------------------------------ preview / submit
    @rule(data=st.data(), limit=st.integers(0, 4))
    def batch_preview(self: BatchMachine, data: st.DataObject, limit: int) -> None:
        filters = _draw_filter(self, data)
        after = data.draw(st.sampled_from([0, *self.model_ids]), label="after_id")
        afters = (after, self._real_id(after) if after else 0)

        async def preview(h: EngineHandle, real: bool) -> tuple[int, list[JobRecord]]:
            target = filters[real]
            total = await h.engine.count_batch_targets(target)
            return total, await h.engine.list_batch_targets(
                target, after_id=afters[real], limit=limit
            )

        _same(self, preview, label="preview")

    @rule(data=st.data(), spec=specs, submitted_by=st.none() | st.just("ops"))
    def batch_submit(
        self: BatchMachine, data: st.DataObject, spec: BatchSpec, submitted_by: str | None
    ) -> None:
        filters = _draw_filter(self, data)
        self.p.clock.advance(TICK)
        model, real = self.p.run_handles(
            lambda h: h.control.batch_operations.create_batch_operation(
                spec=spec,
                filter=filters[h is self.p.real],
                submitted_by=submitted_by,
            )
        )
        assert model.error == real.error, f"submit: model={model.error} real={real.error}"
        if model.error is not None:
            return
        self.batch.real_to_model[real.value.id] = model.value.id
        self.batch.ops.append(
            BatchRef(model.value.id, real.value.id, (model.value.filter, real.value.filter), spec)
        )
        assert _norm(self, model.value, False) == _norm(self, real.value, True), "submit"
        _settle(self)

    # ------------------------------------------------------------------ the runner
    @precondition(lambda self: bool(self.batch.ops))
    @rule(
        runner=st.sampled_from(RUNNERS),
        limit=st.integers(1, 3),
        stages=st.integers(1, 6),
        rescan=st.booleans(),
        retention=st.sampled_from(RETENTIONS),
    )
    def batch_step(
        self: BatchMachine,
        runner: str,
        limit: int,
        stages: int,
        rescan: bool,
        retention: timedelta,
    ) -> None:
        """The leader's runner (``BatchRunner.step``) for up to ``stages`` stages, with
        pages and chunks of ``limit``. Each stage claims the oldest unfinished operation,
        then scans one page of it (and, after the last page, starts it running) or works
        one chunk (finished at the chunk boundary, or each change applied and the outcomes
        recorded). ``rescan`` scans a scanning operation from the start, as a new leader
        does after its predecessor died mid-scan (the items already added stay)."""
        touched: list[BatchRef] = []
        for _ in range(stages):
            model, _ = _same(
                self,
                lambda h, real: h.control.batch_operations.next_batch_operation(runner=runner),
                label="next",
            )
            op = model.value
            if op is None:
                break
            ref = next(ref for ref in self.batch.ops if ref.model == op.id)
            touched.append(ref)
            if op.state == BatchOpState.SCANNING:
                _scan_page(self, ref, limit=limit, rescan=rescan)
                rescan = False
            else:
                _chunk(self, ref, limit=limit, retention=retention)
        _settle(self, *touched)

    # ------------------------------------------------------------------ direct calls
    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data(), spec=specs)
    def batch_apply(self: BatchMachine, data: st.DataObject, spec: BatchSpec) -> None:
        """The per-job change on any job in any state (running, finished, DLQ'd, gone)."""
        job_id = data.draw(st.sampled_from(self.model_ids), label="job")
        ids = (job_id, self._real_id(job_id))
        _same(self, lambda h, real: h.engine.apply_batch_change(ids[real], spec), label="apply")

    @precondition(lambda self: any(ref.items for ref in self.batch.live()))
    @rule(data=st.data())
    def batch_record(self: BatchMachine, data: st.DataObject) -> None:
        """Outcomes for any items, in any order, recorded once or again (a chunk recorded
        twice counts once)."""
        ref = _draw_ref(data, [ref for ref in self.batch.live() if ref.items])
        picked = data.draw(
            st.lists(
                st.tuples(
                    st.sampled_from(sorted(ref.items)),
                    st.sampled_from([ItemOutcome.PROCESSED, ItemOutcome.SKIPPED]) | st.just(None),
                ),
                max_size=4,
            ),
            label="results",
        )

        def results(real: bool) -> list[ItemResult]:
            return [
                ItemResult(
                    self._real_id(job_id) if real else job_id,
                    ItemOutcome.ERRORED if outcome is None else outcome,
                    f"error {n}" if outcome is None else None,
                )
                for n, (job_id, outcome) in enumerate(picked)
            ]

        _same(
            self,
            lambda h, real: h.control.batch_operations.record_batch_items(
                ref.pick(real), results(real), cursor={"after_job_id": 0}
            ),
            label="record",
        )
        _settle(self, ref)

    @precondition(lambda self: bool(self.batch.live()))
    @rule(data=st.data(), call=st.sampled_from(["add", "start"]))
    def batch_late_scan(self: BatchMachine, data: st.DataObject, call: str) -> None:
        """A scan step of a leader that lost the lock meanwhile, on any operation (pending,
        mid-run, finished): a page of jobs added to its items, or its scan ended. A finished
        operation (and, for the end of a scan, one no runner has claimed) stays as it is;
        one is picked as often as any other when there is one."""
        live = self.batch.live()
        finished = [ref for ref in live if ref.state.is_final]
        refs = st.sampled_from(live)
        ref = data.draw(refs | st.sampled_from(finished) if finished else refs, label="operation")
        picked: list[int] = []
        if self.model_ids:
            picked = data.draw(st.lists(st.sampled_from(self.model_ids), max_size=3), label="jobs")
        if call == "add":
            model, _ = _same(
                self,
                lambda h, real: h.control.batch_operations.add_batch_items(
                    ref.pick(real), [self._real_id(i) for i in picked] if real else picked
                ),
                label="late add",
            )
            if model.error is None and not model.value.state.is_final:
                ref.items.update(picked)
        else:
            _same(
                self,
                lambda h, real: h.control.batch_operations.start_batch_running(
                    ref.pick(real), cursor={"after_job_id": 0, "max_job_id": ref.scan_after[real]}
                ),
                label="late start",
            )
        _settle(self, ref)

    @precondition(lambda self: bool(self.batch.ops))
    @rule(data=st.data())
    def batch_cancel(self: BatchMachine, data: st.DataObject) -> None:
        """Cancel any operation: pending, mid-run, finished, purged."""
        ref = _draw_ref(data, self.batch.ops)
        _same(
            self,
            lambda h, real: h.control.batch_operations.cancel_batch_operation(ref.pick(real)),
            label="cancel",
        )
        _settle(self)

    @precondition(lambda self: bool(self.batch.live()))
    @rule(
        data=st.data(),
        state=st.sampled_from(sorted(FINAL_STATES)),
        error=st.none() | st.just("RuntimeError: boom"),
        retention=st.sampled_from(RETENTIONS),
    )
    def batch_finish(
        self: BatchMachine,
        data: st.DataObject,
        state: BatchOpState,
        error: str | None,
        retention: timedelta,
    ) -> None:
        """Finish any operation in any final state: an unfinished one as the runner does
        when it fails (or when it stops), a finished one a second time (which changes
        nothing: its first finish stands)."""
        ref = _draw_ref(data, self.batch.live())
        _finish(self, ref, state, last_error=error, retention=retention, label="finish")
        _settle(self, ref)

    @precondition(lambda self: bool(self.batch.ops))
    @rule(
        offset=st.sampled_from([-60.0, 0.0, 1e-6, 3600.0, 86_400.0 * 100]),
        limit=st.integers(0, 2),
    )
    def batch_purge(self: BatchMachine, offset: float, limit: int) -> None:
        before = self.p.clock.now() + timedelta(seconds=offset)
        _same(
            self,
            lambda h, real: h.control.batch_operations.purge_batch_operations(
                before=before, limit=limit
            ),
            label="purge",
        )
        _refresh(self)
        _settle(self)

    @precondition(lambda self: bool(self.batch.ops))
    @rule(
        data=st.data(),
        state=st.none() | st.sampled_from(list(BatchOpState)),
        limit=st.integers(0, 3),
    )
    def batch_read(
        self: BatchMachine, data: st.DataObject, state: BatchOpState | None, limit: int
    ) -> None:
        ref = _draw_ref(data, self.batch.ops)
        _same(
            self,
            lambda h, real: h.control.batch_operations.list_batch_operations(
                state=state, limit=limit
            ),
            label="list",
        )
        _same(
            self,
            lambda h, real: h.control.batch_operations.get_batch_operation(ref.pick(real)),
            label="get",
        )
        _same_pending(self, ref, limit=limit)

    @rule(
        data=st.data(),
        call=st.sampled_from(["get", "cancel", "add", "start", "pending", "record", "finish"]),
    )
    def batch_unknown(self: BatchMachine, data: st.DataObject, call: str) -> None:
        """Every call naming an operation that is not there (purged, never submitted, or
        no id at all) is answered alike."""
        nowhere = st.uuids(version=4).map(str) | st.sampled_from(MALFORMED_IDS)
        purged = [(ref.model, ref.real) for ref in self.batch.ops if ref.purged]
        op_ids = data.draw(
            nowhere.map(lambda op: (op, op)) | st.sampled_from(purged)
            if purged
            else nowhere.map(lambda op: (op, op)),
            label="operation id",
        )
        job = self.model_ids[0] if self.model_ids else None
        jobs = (job, None if job is None else self._real_id(job))

        def items(real: bool) -> list[int]:
            found = jobs[real]
            return [] if found is None else [found]

        calls: dict[str, Callable[[EngineHandle, bool], Awaitable[Any]]] = {
            "get": lambda h, real: h.control.batch_operations.get_batch_operation(op_ids[real]),
            "cancel": lambda h, real: h.control.batch_operations.cancel_batch_operation(
                op_ids[real]
            ),
            "add": lambda h, real: h.control.batch_operations.add_batch_items(
                op_ids[real], items(real)
            ),
            "start": lambda h, real: h.control.batch_operations.start_batch_running(
                op_ids[real], cursor={}
            ),
            "pending": lambda h, real: h.control.batch_operations.pending_batch_items(
                op_ids[real], limit=10
            ),
            "record": lambda h, real: h.control.batch_operations.record_batch_items(
                op_ids[real],
                [ItemResult(i, ItemOutcome.PROCESSED) for i in items(real)],
                cursor={},
            ),
            "finish": lambda h, real: h.control.batch_operations.finish_batch_operation(
                op_ids[real], state=BatchOpState.COMPLETED, retention=DEFAULT_RETENTION
            ),
        }
        _same(self, calls[call], label=f"unknown operation: {call}")


def _apply_one(m: BatchMachine, ref: BatchRef, job_id: int) -> tuple[ItemResult, ItemResult]:
    """Apply the operation's change to one item on both engines and return what the runner
    records for it on each (``BatchRunner._apply``): a job gone since the scan is skipped,
    an error is kept with the item (its text names the model's job id on both engines)."""
    ids = (job_id, m._real_id(job_id))
    answers = _same(
        m,
        lambda h, real: h.engine.apply_batch_change(ids[real], ref.spec),
        label="chunk: apply",
    )

    def recorded(answer: Outcome, real: bool) -> ItemResult:
        if answer.error is not None:
            return ItemResult(ids[real], ItemOutcome.ERRORED, f"job {job_id}: {answer.error}")
        result: ItemResult = answer.value
        if result.outcome == ItemOutcome.MISSING:
            return ItemResult(result.job_id, ItemOutcome.SKIPPED)
        return result

    return recorded(answers[0], False), recorded(answers[1], True)
