"""Batches (ADR 0035) in the model-vs-real machine: a callback inserted over jobs the
machine holds (waiting on each through a ``run`` edge), whose members then live through
every other rule (claims, completions, failures, cancels, rescues, operator retries,
the DLQ). The callback must be refused alike (a member failed or cancelled already),
released alike, and after every step both engines must count its members the same way
(``JobRelations.parent_counts``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from awa.domain import batches
from awa.domain.batches import BatchCounts
from awa.domain.job import JobSpec
from awa.ports.relations import JobRelations
from tests.property._mvr_base import QUEUES, MachineBase


class JobBatchRules(MachineBase):
    """Inserts a batch's callback over drawn jobs; compares every batch's counts."""

    def __init__(self) -> None:
        super().__init__()
        #: model ids of the callbacks inserted
        self.batch_callbacks: list[int] = []

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data(), queue=st.sampled_from(QUEUES), size=st.integers(1, 3))
    def insert_batch_callback(self, data: st.DataObject, queue: str, size: int) -> None:
        members = data.draw(
            st.lists(st.sampled_from(self.model_ids), min_size=1, max_size=size, unique=True),
            label="members",
        )
        callback = JobSpec(kind="report", queue=queue, args={"batch": len(members)})
        ids = iter((members, [self._real_id(m) for m in members]))
        model, real = self.p.run(
            lambda engine: engine.enqueue_many([batches.callback_spec(callback, next(ids))])
        )
        assert model.error == real.error, f"batch: model={model.error} real={real.error}"
        if model.error is None:
            self._map_jobs(model.value, real.value)
            self.batch_callbacks.append(model.value[0].id)
            assert self._norm(model.value, False) == self._norm(real.value, True)

    @invariant()
    def batch_counts_agree(self) -> None:
        for model_id in self.batch_callbacks:
            model = self.p._call(self.p.model.control.relations, _counts_of(model_id))
            real = self.p._call(self.p.real.control.relations, _counts_of(self._real_id(model_id)))
            assert model == real, f"batch {model_id}: model={model!r} real={real!r}"


def _counts_of(job_id: int) -> Callable[[JobRelations], Awaitable[BatchCounts]]:
    async def read(relations: JobRelations) -> BatchCounts:
        return await relations.parent_counts(job_id)

    return read
