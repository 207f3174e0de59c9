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

A job may also leave without a word (:meth:`DependencyRules.vanish_job`): a ``DELETE``
on ``awa.jobs`` in SQL on Postgres, taken out of the in-memory store unannounced on the
model and the in-memory engines, so the jobs waiting on it keep waiting until the
maintenance leader's search for vanished parents answers them
(:meth:`DependencyRules.answer_vanished_parents`, ADR 0032, "A parent that vanishes").

Every real engine runs these rules, the two-slot ring too: its queue storage sits in a
schema of its own that ``awa.jobs`` does not show, and an insert finds the parents it
names there (``dependency_parents_in``), while the edges stay in ``awa``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from awa.domain.dependencies import EDGE_PRUNE_BATCH, VANISHED_GRACE, OnParentFailure
from awa.domain.job import JobSpec
from awa.domain.results import StoredResult
from awa.domain.states import LIVE_STATES
from awa.ports.relations import Edge, JobEdges
from awa.ports.storage import JobFilter
from tests.property._mvr_base import KINDS, QUEUES, MachineBase, _await
from tests.support.engines import EngineHandle

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

    @initialize(named=st.lists(policies, max_size=2))
    def seed_family(self, named: list[OnParentFailure]) -> None:
        """Start some examples from a parent with a child per policy in ``named``, so
        the rules on parents (a finish, a delete, a parent gone without a word) meet one
        within the default profile's steps."""
        if not named:
            return
        parent = JobSpec(kind=KINDS[1], queue=QUEUES[0], args={"seed": "parent"})
        model, real = self.p.run(lambda engine: engine.enqueue_many([parent]))
        assert model.error is None and real.error is None, (model.error, real.error)
        self._map_jobs(model.value, real.value)
        ids = iter((model.value[0].id, real.value[0].id))

        def children(parent_id: int) -> list[JobSpec]:
            return [
                JobSpec(
                    kind=KINDS[0],
                    queue=QUEUES[1],
                    args={"seed": index},
                    depends_on=(parent_id,),
                    on_parent_failure=(str(policy),),
                )
                for index, policy in enumerate(named)
            ]

        model, real = self.p.run(lambda engine: engine.enqueue_many(children(next(ids))))
        assert model.error is None and real.error is None, (model.error, real.error)
        self._map_jobs(model.value, real.value)
        self._assert_same(model, real, label="seed children")

    @precondition(lambda self: bool(self.model_ids))
    @rule(data=st.data(), answer=st.booleans())
    def vanish_job(self, data: st.DataObject, answer: bool) -> None:
        """A job the model holds, not in a live attempt (most often a parent children
        still wait on), leaves without its children being answered, on both sides where
        the real engine has a way: a ``DELETE`` on ``awa.jobs`` (which records it for
        the leader), or out of its in-memory store. Where it has neither (a queue-storage
        schema ``awa.jobs`` does not show) the job is deleted through the API on both,
        which answers its children at once. With ``answer`` the leader's search runs
        next; without, the children wait meanwhile (``engines_agree`` compares them)."""
        model = self.p.model.engine
        held = self.p.runner.run(_await(model.list_jobs(JobFilter(), limit=100_000)))
        candidates = sorted(job.id for job in held if job.state not in LIVE_STATES)
        if not candidates:
            return
        parents = sorted(self._waited_on().intersection(candidates))
        pool = parents if parents and not data.draw(st.booleans(), label="any job") else candidates
        model_id = data.draw(st.sampled_from(pool), label="job")
        real_id = self._real_id(model_id)
        if self.p.runner.run(_await(_gone_without_a_word(self.p.real, real_id))):
            assert self.p.runner.run(_await(_gone_without_a_word(self.p.model, model_id)))
            ids = iter((model_id, real_id))
            self._same(lambda engine: engine.get_job(next(ids)), label="get_job of a vanished job")
        else:
            ids = iter((model_id, real_id))
            self._same(lambda engine: engine.delete_jobs([next(ids)]), label="delete_jobs")
        if answer:
            self.answer_vanished_parents()

    def _waited_on(self) -> set[int]:
        """The model ids of the parents some child still waits on (an unresolved edge)."""
        store = self.p.model.store
        assert store is not None
        deps = store.state.deps
        return {
            parent
            for child, edges in deps.parents.items()
            for parent, satisfied in edges.items()
            if satisfied is None and (child, parent) not in deps.failed
        }

    @rule()
    def answer_vanished_parents(self) -> None:
        """One step of the maintenance leader's search, from the first parent with the
        leader's page: the children of a job gone without a word are answered as for a
        cancel, by each child's policy, alike on both sides (``engines_agree``); a
        parent deleted through the API had its children answered already."""
        seen_before = self.p.clock.now() - VANISHED_GRACE
        waited_on = len(self._waited_on())
        model, _ = self._same(
            lambda engine: engine.answer_vanished_parents(
                after=0, limit=EDGE_PRUNE_BATCH, seen_before=seen_before
            ),
            label="answer_vanished_parents",
        )
        # one page holds every parent an example makes: the walk starts over
        assert waited_on < EDGE_PRUNE_BATCH and model.value.following is None

    @rule()
    def prune_results(self) -> None:
        """The results' own retention, on the shared clock."""
        now = self.p.clock.now()
        model, real = self.p.run_handles(
            lambda handle: handle.control.results.prune_results(before=now)
        )
        assert (model.value, model.error) == (real.value, real.error)


async def _gone_without_a_word(handle: EngineHandle, job_id: int) -> bool:
    """Remove ``job_id`` as no write of the engine does, its children not answered: from
    the in-memory store, or by a ``DELETE`` on ``awa.jobs`` (which records it for the
    leader). False where neither reaches it (a schema ``awa.jobs`` does not show)."""
    if handle.store is not None:
        state = handle.store.state.copy()
        for side in list(state.sides):
            state.view(side).delete(job_id)
        handle.store.state = state
        return True
    if handle.database_url is None:
        return False
    async with await psycopg.AsyncConnection.connect(handle.database_url) as conn:
        cur = await conn.execute(b"DELETE FROM awa.jobs WHERE id = %s", (job_id,))
        return cur.rowcount == 1


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
