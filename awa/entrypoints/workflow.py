"""``awa.Workflow``: a graph of jobs inserted at once, in one transaction (ADR 0032).

Steps are added with their parents (other steps, by handle or name, or jobs that exist
already, by id or handle); :meth:`Workflow.insert` checks the whole graph (every step's
options, unknown steps, cycles) before it writes anything, then inserts the steps
parents first, each waiting on its parents as ``insert(..., depends_on=...)`` does, in
the caller's transaction or in one of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

import attrs

from awa.domain import dependencies
from awa.domain.dependencies import Dependency, OnParentFailure
from awa.domain.errors import ValidationError
from awa.domain.keywords import check_keywords
from awa.entrypoints.args import build_spec
from awa.entrypoints.client_sync import BlockingClientBase
from awa.entrypoints.insert_options import InsertOptions
from awa.entrypoints.job import Job
from awa.entrypoints.transaction import SyncTransaction, Transaction


@attrs.frozen
class Step:
    """A step of a :class:`Workflow`; pass it in another step's ``depends_on``."""

    name: str


__all__ = ["Dependency", "Step", "Workflow"]


@attrs.frozen
class _Planned:
    args: Any
    options: InsertOptions
    #: Parent steps by name, each with its failure policy.
    steps: tuple[tuple[str, OnParentFailure], ...]
    #: Existing parent jobs, each with its failure policy.
    jobs: tuple[Dependency, ...]


class Workflow:
    """A graph of jobs inserted atomically::

    wf = awa.Workflow()
    a = wf.add(Fetch("a"))
    b = wf.add(Fetch("b"))
    wf.add(Merge(), name="merge", depends_on=[a, b])
    jobs = await wf.insert(client)   # or wf.insert(tx) inside your transaction
    jobs["merge"].id
    """

    def __init__(self) -> None:
        self._steps: dict[str, _Planned] = {}

    def add(
        self,
        args: Any,
        *,
        name: str | None = None,
        depends_on: Sequence[Step | str | int | Job[Any] | Dependency] | None = None,
        on_parent_failure: str = "cancel",
        **options: Unpack[InsertOptions],
    ) -> Step:
        """Add a step: the job ``args`` with the insert ``options`` (``kind``, ``queue``,
        ...), waiting on ``depends_on`` (steps of this workflow by handle or name, which
        may be added later, or existing jobs by id or handle; any of them wrapped in
        :class:`~awa.Dependency` to give that parent its own failure policy).
        ``on_parent_failure`` is the policy of the other parents: ``"cancel"`` (the
        default), ``"run"`` or ``"dlq"`` (ADR 0032). ``name`` defaults to ``step-<n>``.
        The options are checked here; the graph when it is inserted."""
        check_keywords("Workflow.add", options, InsertOptions)
        if name is None:
            name = f"step-{len(self._steps) + 1}"
        if not isinstance(name, str) or not name:
            raise ValidationError("name", "a step name must be a non-empty string")
        if name in self._steps:
            raise ValidationError("name", f"the workflow already has a step {name!r}")
        default = dependencies.on_parent_failure(on_parent_failure, "on_parent_failure")
        build_spec(args, **options)
        if depends_on is not None and (
            isinstance(depends_on, str | bytes) or not isinstance(depends_on, Sequence)
        ):
            raise ValidationError("depends_on", "must be a list of steps or jobs")
        steps: dict[str, OnParentFailure] = {}
        external: list[Dependency] = []
        for entry in depends_on or ():
            parent, policy = (
                (entry.parent, entry.on_failure)
                if isinstance(entry, Dependency)
                else (entry, default)
            )
            if isinstance(parent, Step):
                steps.setdefault(parent.name, policy)
            elif isinstance(parent, str):
                steps.setdefault(parent, policy)
            else:
                external.append(Dependency(parent, policy))
        ids, policies = dependencies.parents_of(external)
        jobs = tuple(
            Dependency(job_id, policies[i] if policies else OnParentFailure.CANCEL)
            for i, job_id in enumerate(ids)
        )
        if len(steps) + len(jobs) > dependencies.MAX_PARENTS:
            raise ValidationError(
                "depends_on",
                f"names {len(steps) + len(jobs)} parents; "
                f"at most {dependencies.MAX_PARENTS} are allowed",
            )
        if (steps or jobs) and options.get("run_at") is not None:
            raise ValidationError(
                "depends_on", "a job that depends on others cannot also set run_at"
            )
        self._steps[name] = _Planned(args, options, tuple(steps.items()), jobs)
        return Step(name)

    @property
    def steps(self) -> list[str]:
        """The step names, in the order they were added."""
        return list(self._steps)

    def _order(self) -> list[str]:
        if not self._steps:
            raise ValidationError("workflow", "has no steps")
        return dependencies.order_steps(
            {n: [p for p, _ in s.steps] for n, s in self._steps.items()}
        )

    async def insert(self, target: Any) -> dict[str, Job[Any]]:
        """Insert every step, parents first, in one transaction: ``target`` is an
        :class:`~awa.AsyncClient` (a transaction of its own, committed at the end) or a
        :class:`~awa.Transaction` (the caller's, which commits or rolls back with them).
        Returns the inserted jobs by step name. A bad graph raises ``ValidationError``
        before anything is written."""
        order = self._order()
        if isinstance(target, Transaction):
            return await self._insert_in(target, order)
        if isinstance(target, SyncTransaction | BlockingClientBase) or not hasattr(
            target, "transaction"
        ):
            raise TypeError(
                "Workflow.insert takes an AsyncClient or a Transaction, "
                f"got {type(target).__name__}"
            )
        async with await target.transaction() as tx:
            return await self._insert_in(tx, order)

    async def _insert_in(self, tx: Any, order: list[str]) -> dict[str, Job[Any]]:
        jobs: dict[str, Job[Any]] = {}
        for name in order:
            step = self._steps[name]
            jobs[name] = await tx.insert(step.args, **step.options, depends_on=_parents(step, jobs))
        return {name: jobs[name] for name in self._steps}

    def insert_sync(self, target: Any) -> dict[str, Job[Any]]:
        """Blocking twin of :meth:`insert`: ``target`` is a :class:`~awa.Client` or a
        :class:`~awa.SyncTransaction`."""
        order = self._order()
        if isinstance(target, SyncTransaction):
            return self._insert_in_sync(target, order)
        if not isinstance(target, BlockingClientBase):
            raise TypeError(
                f"Workflow.insert_sync takes a Client or a SyncTransaction, "
                f"got {type(target).__name__}"
            )
        with target.transaction() as tx:
            jobs = self._insert_in_sync(tx, order)
        return jobs

    def _insert_in_sync(self, tx: Any, order: list[str]) -> dict[str, Job[Any]]:
        jobs: dict[str, Job[Any]] = {}
        for name in order:
            step = self._steps[name]
            jobs[name] = tx.insert(step.args, **step.options, depends_on=_parents(step, jobs))
        return {name: jobs[name] for name in self._steps}


def _parents(step: _Planned, inserted: dict[str, Job[Any]]) -> list[Dependency]:
    return [*(Dependency(inserted[p].id, policy) for p, policy in step.steps), *step.jobs]
