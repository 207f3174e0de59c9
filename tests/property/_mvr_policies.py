"""Per-kind policies in the model-vs-real machine (ADR 0028).

Each example registers, on both engines, a retry policy drawn by Hypothesis for one kind
(or none), so every retry, callback timeout and rescue rule of that kind runs under it;
and an effect rule for the kind ``relay``, whose jobs name a peer job: when a relay's
attempt ends completed the peer, if it waits (scheduled or retryable), becomes available
now; when it ends failed or cancelled the peer is cancelled. The machine then demands the
same states, ``run_at`` and errors of both engines, whichever rule ended the attempt
(complete, retry, fail, cancel, callback resolution, rescue, on any ring turn)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from awa.domain import lifecycle
from awa.domain.job import JobRecord, JobSpec, RunLease
from awa.domain.kind_policies import ChangeJob, Effect
from awa.domain.lifecycle import Transition
from awa.domain.policies import BackoffShape, RetryPolicy
from awa.domain.states import DEFERRED_STATES, JobState
from awa.ports.storage import StorageEngine
from tests.property._mvr_base import KINDS, QUEUES, MachineBase

#: The kind whose policy is drawn; the other kind keeps the default (the fallback).
POLICY_KIND = KINDS[1]
#: The kind whose attempts' ends move their peer job, and the queue its relays run on.
RELAY_KIND = "relay"
RELAY_QUEUE = "relays"
#: How a relay's attempt ends in :meth:`PolicyRules.a_relay_runs_and_ends`.
ENDINGS = ("complete", "fail", "cancel", "retry")

retry_policies = st.builds(
    RetryPolicy,
    max_attempts=st.none() | st.integers(1, 4),
    backoff=st.sampled_from(list(BackoffShape)),
    base=st.sampled_from([0.5, 1.0, 7.0, 40.0]),
    jitter=st.sampled_from([0.0, 0.25, 1.0]),
    max_delay=st.sampled_from([3.0, 60.0, 86_400.0]),
)


def _release(now: datetime) -> Transition:
    return Transition(JobState.Available, applies_to=DEFERRED_STATES, run_at=now)


def relay_rule(peer_id: Callable[[int], int]) -> Callable[[JobRecord], Sequence[Effect]]:
    """The relay rule of one engine; ``peer_id`` maps the model id a relay's args name
    to that engine's id of the peer."""

    def rule(job: JobRecord) -> Sequence[Effect]:
        at = job.finalized_at
        if at is None:
            return ()  # back to waiting (a retry, a snooze): the peer waits too
        peer = peer_id(int(job.args["peer"]))
        if job.state == JobState.Completed:
            return (ChangeJob(peer, _release(at)),)
        return (ChangeJob(peer, lifecycle.operator_cancel(at)),)

    return rule


class PolicyRules(MachineBase):
    @initialize(policy=st.none() | retry_policies)
    def register_policies(self, policy: RetryPolicy | None) -> None:
        """Both engines' lifecycles read the same registrations."""
        self.p.model.policies.set_retry(POLICY_KIND, policy)
        self.p.real.policies.set_retry(POLICY_KIND, policy)
        self.p.model.policies.set_effects(RELAY_KIND, relay_rule(lambda model_id: model_id))
        self.p.real.policies.set_effects(RELAY_KIND, relay_rule(self._real_id))

    def _enqueue_relay(self, data: st.DataObject, queue: str) -> None:
        if data.draw(st.booleans(), label="a waiting peer of its own"):
            # A peer that waits (scheduled), the state a completion's effect releases.
            later = self.p.clock.now() + timedelta(seconds=200)
            waiting = JobSpec(kind=KINDS[0], queue=QUEUES[0], run_at=later)
            model, real = self.p.run(lambda engine: engine.enqueue_many([waiting]))
            assert model.error is None and real.error is None, (model.error, real.error)
            self._map_jobs(model.value, real.value)
            peer = model.value[0].id
        else:
            peer = data.draw(st.sampled_from(self.model_ids), label="peer")
        spec = JobSpec(kind=RELAY_KIND, queue=queue, args={"peer": peer}, max_attempts=2)
        model, real = self.p.run(lambda engine: engine.enqueue_many([spec]))
        assert model.error == real.error, f"relay: model={model.error} real={real.error}"
        if model.error is None:
            self._map_jobs(model.value, real.value)
            assert self._norm(model.value, False) == self._norm(real.value, True)

    @precondition(lambda self: self.model_ids)
    @rule(data=st.data(), queue=st.sampled_from(QUEUES))
    def enqueue_a_relay(self, data: st.DataObject, queue: str) -> None:
        """A relay job naming a peer the machine inserted (its model id, in its args),
        left to the other rules (claims, outcomes, rescues, ring turns) among the jobs
        of ``queue``."""
        self._enqueue_relay(data, queue)

    @precondition(lambda self: self.model_ids)
    @rule(data=st.data(), ending=st.sampled_from(ENDINGS))
    def a_relay_runs_and_ends(self, data: st.DataObject, ending: str) -> None:
        """A relay on a queue of its own is claimed and its attempt ends at once, so the
        effect of each ending reaches a peer in whatever state the machine left it."""
        self._enqueue_relay(data, RELAY_QUEUE)
        model, real = self._same(lambda engine: engine.claim(RELAY_QUEUE, limit=1), label="claim")
        if model.error is not None or not model.value:
            return
        leases = iter((model.value[0].lease, real.value[0].lease))
        self.leases.append((model.value[0].lease, real.value[0].lease))
        end: Callable[[StorageEngine, RunLease], Awaitable[object]] = {
            "complete": lambda engine, lease: engine.complete([lease]),
            "fail": lambda engine, lease: engine.fail(lease, error="relay failed"),
            "cancel": lambda engine, lease: engine.cancel_attempt(lease, reason="relay"),
            "retry": lambda engine, lease: engine.retry(lease, error="relay again"),
        }[ending]
        self._same(lambda engine: end(engine, next(leases)), label=f"relay {ending}")
