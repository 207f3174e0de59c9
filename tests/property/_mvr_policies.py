"""Per-kind policies in the model-vs-real machine: each example registers a retry policy
drawn by Hypothesis for one kind (or none) on both engines, so every retry, callback
timeout and rescue rule of that kind runs under it, and the machine demands the same
states, ``run_at`` and errors from the model and the real engine (ADR 0028)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from awa.domain.policies import BackoffShape, RetryPolicy
from tests.property._mvr_base import KINDS, MachineBase

#: The kind whose policy is drawn; the other kind keeps the default (the fallback).
POLICY_KIND = KINDS[1]

retry_policies = st.builds(
    RetryPolicy,
    max_attempts=st.none() | st.integers(1, 4),
    backoff=st.sampled_from(list(BackoffShape)),
    base=st.sampled_from([0.5, 1.0, 7.0, 40.0]),
    jitter=st.sampled_from([0.0, 0.25, 1.0]),
    max_delay=st.sampled_from([3.0, 60.0, 86_400.0]),
)


class PolicyRules(MachineBase):
    @initialize(policy=st.none() | retry_policies)
    def register_a_retry_policy(self, policy: RetryPolicy | None) -> None:
        """Both engines' lifecycles read the same registration."""
        self.p.model.policies.set_retry(POLICY_KIND, policy)
        self.p.real.policies.set_retry(POLICY_KIND, policy)
