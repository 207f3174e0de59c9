"""A workflow's graph (ADR 0032): steps ordered parents first, keeping the order they were
added where the graph allows; unknown steps, self-dependencies and cycles refused by name
before anything is written."""

from __future__ import annotations

import attrs
import pytest

import awa
from awa.domain.dependencies import MAX_PARENTS, order_steps
from awa.domain.errors import ValidationError


@attrs.frozen
class Work:
    n: int


def test_parents_come_first_and_the_added_order_is_kept_otherwise() -> None:
    graph = {"join": ["a", "b"], "a": [], "b": ["a"], "side": []}
    assert order_steps(graph) == ["a", "b", "join", "side"]


def test_a_step_naming_no_step_is_refused() -> None:
    with pytest.raises(ValidationError, match="step 'b' depends on 'nope', which is no step"):
        order_steps({"a": [], "b": ["nope"]})


def test_a_self_dependency_is_refused() -> None:
    with pytest.raises(ValidationError, match="step 'a' depends on itself"):
        order_steps({"a": ["a"]})


def test_a_cycle_is_refused_naming_its_steps() -> None:
    with pytest.raises(ValidationError, match="the steps 'b', 'c', 'd' form a cycle"):
        order_steps({"a": [], "b": ["a", "d"], "c": ["b"], "d": ["c"]})


def test_the_builder_checks_options_names_and_parents_as_steps_are_added() -> None:
    wf = awa.Workflow()
    first = wf.add(Work(1))
    assert first == awa.Step("step-1")
    with pytest.raises(ValidationError, match="already has a step 'step-1'"):
        wf.add(Work(2), name="step-1")
    with pytest.raises(ValidationError, match="priority"):
        wf.add(Work(3), priority=9)
    with pytest.raises(TypeError, match="unexpected keyword argument 'queu'"):
        wf.add(Work(4), queu="x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match=f"at most {MAX_PARENTS}"):
        wf.add(Work(5), depends_on=list(range(1, MAX_PARENTS + 2)))
    with pytest.raises(ValidationError, match="run_at"):
        wf.add(Work(6), depends_on=[first], run_at="2030-01-01T00:00:00Z")
    assert wf.steps == ["step-1"]


def test_depends_on_entries_carry_their_failure_policy() -> None:
    from awa.domain.dependencies import OnParentFailure, parents_of

    ids, policies = parents_of([3, awa.Dependency(4, on_failure="run"), 3])
    assert (ids, policies) == ((3, 4), ("cancel", "run"))
    assert parents_of([5, awa.Dependency(6)]) == ((5, 6), ())
    assert awa.Dependency(1, on_failure="dlq").on_failure is OnParentFailure.DLQ
    with pytest.raises(ValidationError, match="on_failure: must be one of 'cancel', 'run', 'dlq'"):
        awa.Dependency(1, on_failure="ignore")


def test_a_thousand_parents_are_refused_at_the_cap() -> None:
    with pytest.raises(ValidationError, match=f"more than {MAX_PARENTS} jobs"):
        awa.Workflow().add(Work(1), depends_on=list(range(1, 1001)))
    wf = awa.Workflow()
    steps = [wf.add(Work(n)) for n in range(1000)]
    with pytest.raises(ValidationError, match=f"names 1000 parents; at most {MAX_PARENTS}"):
        wf.add(Work(0), depends_on=steps)
    assert len(wf.steps) == 1000
