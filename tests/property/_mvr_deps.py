"""Dependencies and results in the model-vs-real machine (ADR 0032, ADR 0033).

Inserts of jobs waiting on one to three parents drawn from every job the machine has
made (waiting, running, finished, in the DLQ), each parent with a policy drawn from
``cancel``, ``run`` and ``dlq``; both engines must refuse the same inserts (a parent
failed or cancelled) and insert the same waiting or released jobs. The parents then
complete, fail, retry, are cancelled, drained, retried by the operator or from the DLQ
through the machine's other rules, and after every step both engines must hold the same
jobs (``engines_agree``); :meth:`DependencyRules.read_edges` compares each job's edges as
the operator surfaces read them. Results are stored and read back through each side's
result store: a stored value, its kind and its expiry read the same on both.

Every real engine runs these rules, the two-slot ring too: its queue storage sits in a
schema of its own that ``awa.jobs`` does not show, and an insert finds the parents it
names there (``dependency_parents_in``), while the edges stay in ``awa``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from awa.domain.dependencies import OnParentFailure
from awa.domain.job import JobSpec
from awa.domain.results import StoredResult
from awa.ports.relations import Edge, JobEdges
from tests.property._mvr_base import KINDS, QUEUES, MachineBase, _await

policies = st.sampled_from(list(OnParentFailure))
results = st.sampled_from([{"n": 1}, [1, "two"], "done", 3, None, {"nested": {"ok": True}}])

#: Far enough ahead that every result stored in an example has expired by then.
_FOREVER = timedelta(days=36_500)


class DependencyRules(MachineBase):
    """Jobs with parents, their edges, and stored results."""

    def __init__(self) -> None:
        super().__init__()
        # model ids whose result this example stored (the stores outlive an example)
        self.stored: set[int] = set()

    @initialize()
    def forget_results(self) -> None:
        """Neither side's reset touches its result store: drop what earlier examples
        stored, so a model id reused by this example reads no stale result."""
        horizon = self.p.clock.now() + _FOREVER
        for handle in (self.p.model, self.p.real):
            self.p.runner.run(_await(handle.control.results.prune_results(before=horizon)))

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data(), queue=st.sampled_from(QUEUES), count=st.integers(1, 2))
    def enqueue_child(self, data: st.DataObject, queue: str, count: int) -> None:
        parents = data.draw(
            st.lists(st.sampled_from(self.model_ids), min_size=1, max_size=3, unique=True),
            label="parents",
        )
        named = data.draw(
            st.lists(policies, min_size=len(parents), max_size=len(parents)), label="policies"
        )

        def specs(ids: list[int]) -> list[JobSpec]:
            return [
                JobSpec(
                    kind=KINDS[0],
                    queue=queue,
                    args={"child": index},
                    depends_on=tuple(ids),
                    on_parent_failure=tuple(str(p) for p in named),
                )
                for index in range(count)
            ]

        sides = iter((specs(parents), specs([self._real_id(p) for p in parents])))
        model, real = self.p.run(lambda engine: engine.enqueue_many(next(sides)))
        assert model.error == real.error, f"enqueue_child: model={model.error} real={real.error}"
        if model.error is None:
            self._map_jobs(model.value, real.value)
            assert self._norm(model.value, False) == self._norm(real.value, True)

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def read_edges(self, data: st.DataObject) -> None:
        """A job's parents and children with each edge's satisfaction, failure and
        policy, as ``awa job get``, REST and the UI read them."""
        model_id = data.draw(st.sampled_from(self.model_ids), label="job")
        real_id = self._real_id(model_id)
        model, real = self.p.run_handles(
            lambda handle: handle.control.relations.job_edges(
                model_id if handle is self.p.model else real_id, limit=10
            )
        )
        assert model.error is None and real.error is None, (model.error, real.error)
        assert _edges(model.value, lambda i: i) == _edges(real.value, self._mid), (
            f"job_edges of {model_id}: model={model.value!r} real={real.value!r}"
        )

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data(), value=results, kind=st.none() | st.sampled_from(KINDS))
    def store_result(self, data: st.DataObject, value: Any, kind: str | None) -> None:
        """A handler's result stored (again, replacing an earlier attempt's)."""
        model_id = data.draw(st.sampled_from(self.model_ids), label="job")
        ids = iter((model_id, self._real_id(model_id)))
        text = json.dumps(value)
        model, real = self.p.run_handles(
            lambda handle: handle.control.results.store_result(next(ids), text, kind=kind)
        )
        assert model.error is None and real.error is None, (model.error, real.error)
        self.stored.add(model_id)

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data())
    def read_result(self, data: st.DataObject) -> None:
        """What ``wait_for`` and ``job.parent_results`` read: the value, its kind and
        when it expires, or nothing where none was stored (or it expired)."""
        model_id = data.draw(st.sampled_from(self.model_ids), label="job")
        ids = iter((model_id, self._real_id(model_id)))
        model, real = self.p.run_handles(
            lambda handle: handle.control.results.get_result(next(ids))
        )
        assert model.error is None and real.error is None, (model.error, real.error)
        assert _result(model.value) == _result(real.value), (
            f"get_result of {model_id}: model={model.value!r} real={real.value!r}"
        )
        if model_id not in self.stored:
            assert model.value is None

    @rule()
    def prune_results(self) -> None:
        """The results' own retention, on the shared clock."""
        now = self.p.clock.now()
        model, real = self.p.run_handles(
            lambda handle: handle.control.results.prune_results(before=now)
        )
        assert (model.value, model.error) == (real.value, real.error)


def _edges(edges: JobEdges, ident: Any) -> tuple[Any, ...]:
    def one(edge: Edge) -> tuple[Any, ...]:
        return (ident(edge.job_id), edge.satisfied_at, edge.failed, edge.on_failure)

    return (
        sorted(map(one, edges.parents)),
        sorted(map(one, edges.children)),
        edges.parent_count,
        edges.child_count,
    )


def _result(stored: StoredResult | None) -> tuple[Any, ...] | None:
    if stored is None:
        return None
    return (stored.value, stored.kind, stored.stored_at, stored.expires_at)
