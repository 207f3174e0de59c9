"""Per-key concurrency: no interleaving of claims, completions, rescues, shutdown
releases and callbacks ever has more than the limit running for a key (the domain rule
as the in-memory model applies it)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from awa.domain.flow_control import admit, holds_slot, running_by_key
from awa.domain.states import JobState

KEYS = st.sampled_from(["a", "b", "c", None])


class PerKeyLimit(RuleBasedStateMachine):
    """Jobs of one queue; a claim asks the rule which available ones it takes."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[int, JobState] = {}
        self.keys: dict[int, str | None] = {}
        self.limit = 1
        # Whether the limit was lowered below what runs: then a key may be over it until
        # its attempts end, but no claim adds to it.
        self.lowered = False

    @initialize(limit=st.integers(1, 3))
    def start(self, limit: int) -> None:
        self.limit = limit

    @rule(key=KEYS, n=st.integers(1, 4))
    def insert(self, key: str | None, n: int) -> None:
        for _ in range(n):
            job = len(self.states)
            self.states[job] = JobState.Available
            self.keys[job] = key

    def _live(self) -> list[int]:
        return sorted(j for j, s in self.states.items() if holds_slot(s))

    def _held(self) -> dict[str, int]:
        return dict(running_by_key((self.keys[j], s) for j, s in self.states.items()))

    @rule(batch=st.integers(1, 6))
    def claim(self, batch: int) -> None:
        before = self._held()
        available = sorted(j for j, s in self.states.items() if s is JobState.Available)
        taken = admit(
            available,
            key_of=self.keys.__getitem__,
            running=before,
            max_running_per_key=self.limit,
            limit=batch,
        )
        assert len(taken) <= batch
        for job in taken:
            self.states[job] = JobState.Running
        after = self._held()
        for key, count in after.items():
            if count > before.get(key, 0):
                assert count <= self.limit, (key, count, self.limit)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), end=st.sampled_from(["complete", "fail", "retry", "snooze", "cancel"]))
    def end_attempt(self, data: st.DataObject, end: str) -> None:
        job = data.draw(st.sampled_from(self._live()))
        self.states[job] = {
            "complete": JobState.Completed,
            "fail": JobState.Failed,
            "retry": JobState.Retryable,
            "snooze": JobState.Scheduled,
            "cancel": JobState.Cancelled,
        }[end]

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def rescue_or_release(self, data: st.DataObject) -> None:
        # A rescue (stale heartbeat, deadline) and a shutdown release make the job
        # retryable; a promotion later makes it available again.
        job = data.draw(st.sampled_from(self._live()))
        self.states[job] = JobState.Retryable

    @precondition(lambda self: any(s is JobState.Running for s in self.states.values()))
    @rule(data=st.data())
    def wait_for_callback(self, data: st.DataObject) -> None:
        running = [j for j, s in self.states.items() if s is JobState.Running]
        self.states[data.draw(st.sampled_from(running))] = JobState.WaitingExternal

    @rule()
    def promote(self) -> None:
        for job, state in self.states.items():
            if state in (JobState.Retryable, JobState.Scheduled):
                self.states[job] = JobState.Available

    @rule(limit=st.integers(1, 3))
    def change_limit_live(self, limit: int) -> None:
        if any(count > limit for count in self._held().values()):
            self.lowered = True
        self.limit = limit

    @invariant()
    def never_more_than_the_limit_per_key(self) -> None:
        if not self.lowered:
            assert all(count <= self.limit for count in self._held().values())


TestPerKeyLimit = PerKeyLimit.TestCase
