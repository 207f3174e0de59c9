"""Unique conflict modes in the model-vs-real machine (ADR 0034).

Inserts drawn with a ``replace`` or ``debounce`` mode, a unique key of the machine's
two, a state mask with or without ``running`` and one or two jobs of the key in a batch
(the second merges into the first), alone or inside a unit of work. The in-memory model
applies :func:`awa.domain.unique_conflict.merged`, the Postgres engines
``awa.unique_conflict_merge``; the machine demands the same answers (merged records,
outcome counts, ``UniqueConflict`` when the holder runs) and, after every step, the same
jobs of both. The clock's other rules move time between inserts, so debounces meet both
their window and their ``max_wait``."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st
from hypothesis.stateful import rule

from awa.domain.job import JobRecord, JobSpec
from awa.domain.states import DEFAULT_UNIQUE_STATES, JobState, states_to_mask
from awa.domain.unique_conflict import (
    ConflictMode,
    InsertOutcome,
    insert_outcome,
    with_conflict_mode,
)
from awa.ports.storage import StorageEngine
from tests.property._mvr_base import KINDS, QUEUES, UNIQUE_KEYS, MachineBase, delays

modes = st.sampled_from(
    [
        ConflictMode("replace"),
        ConflictMode("debounce", 5.0, 5.0),
        ConflictMode("debounce", 7.0, 40.0),
    ]
)
#: The default mask, and one without ``running`` (a new job may wait beside a run).
masks = st.sampled_from(
    [DEFAULT_UNIQUE_STATES, states_to_mask({JobState.Scheduled, JobState.Available})]
)


class UniqueConflictRules(MachineBase):
    """Inserts that merge into the waiting holder of their key."""

    @rule(
        kind=st.sampled_from(KINDS),
        queue=st.sampled_from(QUEUES),
        mode=modes,
        unique=st.sampled_from(UNIQUE_KEYS),
        mask=masks,
        priority=st.integers(1, 4),
        run_in=st.none() | delays,
        count=st.integers(1, 2),
        in_unit=st.booleans(),
    )
    def enqueue_on_conflict(
        self,
        kind: str,
        queue: str,
        mode: ConflictMode,
        unique: bytes,
        mask: int,
        priority: int,
        run_in: float | None,
        count: int,
        in_unit: bool,
    ) -> None:
        run_at = None if run_in is None else self.p.clock.now() + timedelta(seconds=run_in)
        specs = [
            JobSpec(
                kind=kind,
                queue=queue,
                args={"n": index, "at": self.p.clock.now().isoformat()},
                priority=priority,
                run_at=run_at,
                metadata=with_conflict_mode({"i": index}, mode),
                tags=("t",) if index else (),
                unique_key=unique,
                unique_states=mask,
            )
            for index in range(count)
        ]

        async def insert(engine: StorageEngine) -> list[JobRecord]:
            if not in_unit:
                return await engine.enqueue_many(specs)
            async with engine.transaction() as uow:
                return await engine.enqueue_many(specs, uow=uow)

        model, real = self.p.run(insert)
        if model.error is None and real.error is None and len(model.value) == len(real.value):
            fresh = [
                (m, r)
                for m, r in zip(model.value, real.value, strict=True)
                if insert_outcome(m.metadata) == InsertOutcome.INSERTED
                and m.id not in self.model_ids
            ]
            self._map_jobs([m for m, _ in fresh], [r for _, r in fresh])
        self._assert_same(model, real, label=f"enqueue on_conflict={mode.mode}")
