"""Validation of ``start()`` arguments."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from awa.domain.errors import AwaError, ValidationError
from awa.runtime.config import RateLimit, parse_start_args

H = {"default"}


def test_defaults_infer_one_queue_per_handler_queue() -> None:
    config = parse_start_args(None, handler_queues={"b", "a"})
    assert [q.name for q in config.queues] == ["a", "b"]
    assert all(q.max_workers == 10 for q in config.queues)
    assert config.poll_interval == 0.2
    assert config.heartbeat_interval == 30.0
    assert config.heartbeat_staleness == timedelta(seconds=90)
    assert config.promote_interval == 0.25
    assert config.heartbeat_rescue_interval == 30.0
    assert config.deadline_rescue_interval == 30.0
    assert config.callback_rescue_interval == 30.0
    assert config.leader_election_interval == 10.0
    assert config.completed_retention == timedelta(hours=24)
    assert config.failed_retention == timedelta(hours=72)
    assert config.cleanup_batch_size == 1000
    queue = config.queues[0]
    assert queue.deadline == timedelta(minutes=5)
    assert queue.aging_interval == timedelta(seconds=60)
    assert queue.claim_batch_size == 512
    assert queue.claimers == 1
    assert config.weighted is False


def test_tuple_and_dict_forms() -> None:
    config = parse_start_args(
        [
            ("default", 4),
            {
                "name": "email",
                "max_workers": 3,
                "rate_limit": (5.0, 2),
                "deadline_duration_ms": 0,
                "priority_aging_interval_ms": 500,
                "claimers": 2,
                "claim_batch_size": 8,
                "retention": {"completed_hours": None},
            },
        ],
        handler_queues={"default", "email"},
        poll_interval_ms=50,
        heartbeat_interval_ms=100,
    )
    default, email = config.queues
    assert default.max_workers == 4
    assert email.max_workers == 3
    assert email.rate_limit == RateLimit(5.0, 2)
    assert email.deadline is None
    assert email.aging_interval == timedelta(milliseconds=500)
    assert (email.claimers, email.claim_batch_size) == (2, 8)
    assert config.poll_interval == pytest.approx(0.05)
    assert config.heartbeat_interval == pytest.approx(0.1)
    assert config.total_capacity == 7


def test_weighted_mode() -> None:
    config = parse_start_args(
        [{"name": "a", "min_workers": 2, "weight": 3}, {"name": "b", "weight": 1}],
        handler_queues={"a", "b"},
        global_max_workers=10,
    )
    a, b = config.queues
    assert (a.min_workers, a.weight, a.max_workers) == (2, 3, None)
    assert (b.min_workers, b.weight) == (0, 1)
    assert config.weighted and config.total_capacity == 10


@pytest.mark.parametrize(
    ("queues", "kwargs", "error", "match"),
    [
        (None, {"handler_queues": set()}, AwaError, "register at least one worker before starting"),
        ([("other", 2)], {}, ValueError, "missing: 'default'"),
        ([("default", 0)], {}, ValueError, "max_workers must be > 0"),
        ([("default", "2")], {}, TypeError, "max_workers must be an integer"),
        ([("default", 2, 3)], {}, ValueError, r"queues\[0\] must be a \(name, max_workers\)"),
        (
            [("default", 2), ("default", 3)],
            {},
            AwaError,
            "queue 'default' configured more than once",
        ),
        ([42], {}, TypeError, r"queues\[0\] must be a"),
        ("default", {}, TypeError, "queues must be a list"),
        ([], {}, ValueError, "at least one queue"),
        ([(1, 2)], {}, TypeError, "name must be a string"),
        ([{"max_workers": 2}], {}, ValueError, "requires 'name'"),
        ([{"name": "default", "bogus": 1}], {}, ValueError, "unknown queue config key.*bogus"),
        (
            [{"name": "default", "max_workers": 2, "min_workers": 1}],
            {},
            ValueError,
            "mutually exclusive",
        ),
        (
            [{"name": "default", "min_workers": 1}],
            {},
            ValueError,
            "min_workers requires global_max_workers",
        ),
        ([{"name": "default", "weight": 0}], {}, ValueError, "weight must be > 0"),
        ([{"name": "default", "claimers": 0}], {}, ValueError, "claimers must be > 0"),
        (
            [{"name": "default", "claim_batch_size": 0}],
            {},
            ValueError,
            "claim_batch_size must be > 0",
        ),
        ([{"name": "default", "rate_limit": 5}], {}, TypeError, "rate_limit must be a"),
        ([{"name": "default", "rate_limit": (0, 1)}], {}, ValueError, "max_rate must be > 0"),
        ([{"name": "default", "rate_limit": (1.0, 0)}], {}, ValueError, "burst must be > 0"),
        ([{"name": "default", "retention": 3}], {}, TypeError, "retention must be a dict"),
        (
            [{"name": "default", "retention": {"done_hours": 1}}],
            {},
            ValueError,
            "unknown retention key",
        ),
        (
            [{"name": "default", "retention": {"failed_hours": 1}}],
            {},
            ValueError,
            r"retention.failed_hours per queue is not supported .* "
            r"start\(failed_retention_hours=...\)",
        ),
        (
            [{"name": "default", "retention": {"completed_hours": 1, "failed_hours": 2}}],
            {},
            ValueError,
            r"start\(completed_retention_hours=..., failed_retention_hours=...\)",
        ),
        (
            [{"name": "default", "deadline_duration_ms": -1}],
            {},
            ValueError,
            "deadline_duration_ms must be >= 0",
        ),
        (
            [("default", 2)],
            {"global_max_workers": 4},
            ValueError,
            "tuple queue config is not supported with global_max_workers",
        ),
        (
            None,
            {"global_max_workers": 4},
            ValueError,
            r"weighted mode requires explicit queue configs \(global_max_workers set but "
            r"queues=None\)",
        ),
        (
            [{"name": "default", "min_workers": 5}],
            {"global_max_workers": 4},
            ValueError,
            r"sum of min_workers \(5\) exceeds global_max_workers \(4\)",
        ),
        ([("default", 1)], {"global_max_workers": 0}, ValueError, "global_max_workers must be"),
        (None, {"poll_interval_ms": 0}, ValueError, "poll_interval_ms must be > 0"),
        (None, {"heartbeat_interval_ms": "fast"}, TypeError, "heartbeat_interval_ms must be"),
        (None, {"cleanup_batch_size": 0}, ValueError, "cleanup_batch_size must be > 0"),
        (
            None,
            {"storage_transition_role": "x"},
            ValueError,
            "must be one of 'auto', 'canonical_drain', or 'queue_storage_target' \\(got 'x'\\)",
        ),
        (None, {"completed_retention_hours": -1}, ValueError, "completed_retention_hours"),
    ],
)
def test_invalid_arguments(
    queues: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    kwargs.setdefault("handler_queues", H)
    with pytest.raises(error, match=match):
        parse_start_args(queues, **kwargs)


@pytest.mark.parametrize(
    "field",
    [
        "queue_storage_queue_slot_count",
        "queue_storage_lease_slot_count",
        "queue_storage_claim_slot_count",
    ],
)
def test_ring_sizes_are_refused_rather_than_ignored(field: str) -> None:
    from awa.domain.errors import ValidationError

    sized: dict[str, Any] = {field: 3}
    for schema in (None, "awa", "side"):
        with pytest.raises(ValidationError, match="set when queue storage is installed") as info:
            parse_start_args([("q", 1)], handler_queues={"q"}, queue_storage_schema=schema, **sized)
        assert info.value.field == field
    defaults: dict[str, Any] = {"queue_storage_queue_slot_count": 16}
    parse_start_args([("q", 1)], handler_queues={"q"}, **defaults)


@pytest.mark.parametrize(
    "keyword", ["queue_storage_claim_rotate_interval_ms", "terminal_count_rollup_interval_ms"]
)
def test_keywords_without_effect_warn(keyword: str) -> None:
    with pytest.warns(UserWarning, match=f"{keyword} has no effect"):
        options: dict[str, Any] = {keyword: 500}
        parse_start_args([("q", 1)], handler_queues={"q"}, **options)


def test_only_listed_queues_serves_a_subset_of_the_handler_queues() -> None:
    with pytest.raises(ValueError, match="every queue with a registered handler"):
        parse_start_args([("email", 3)], handler_queues={"email", "reports"})
    config = parse_start_args(
        [("email", 3)], handler_queues={"email", "reports"}, only_listed_queues=True
    )
    assert [(q.name, q.max_workers) for q in config.queues] == [("email", 3)]
    # Without a list there is nothing to take a subset of: every handler queue is served.
    everything = parse_start_args(
        None, handler_queues={"email", "reports"}, only_listed_queues=True
    )
    assert sorted(q.name for q in everything.queues) == ["email", "reports"]


def test_completion_batching_reads_the_environment_unless_start_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWA_COMPLETION_BATCH_SIZE", "64")
    monkeypatch.setenv("AWA_COMPLETION_FLUSH_MS", "2.5")
    config = parse_start_args(None, handler_queues=H)
    assert config.completion_batch_size == 64
    assert config.completion_flush_interval == 0.0025
    # the keywords of start() win over the environment
    config = parse_start_args(
        None, handler_queues=H, completion_batch_size=8, completion_flush_ms=0
    )
    assert config.completion_batch_size == 8
    assert config.completion_flush_interval == 0.0
    monkeypatch.delenv("AWA_COMPLETION_BATCH_SIZE")
    monkeypatch.setenv("AWA_COMPLETION_FLUSH_MS", "  ")
    config = parse_start_args(None, handler_queues=H)
    assert config.completion_batch_size == 512
    assert config.completion_flush_interval == 0.001


@pytest.mark.parametrize(
    ("variable", "raw", "error", "message"),
    [
        (
            "AWA_COMPLETION_BATCH_SIZE",
            "lots",
            ValueError,
            "AWA_COMPLETION_BATCH_SIZE must be an integer",
        ),
        ("AWA_COMPLETION_BATCH_SIZE", "0", ValueError, "AWA_COMPLETION_BATCH_SIZE must be > 0"),
        ("AWA_COMPLETION_FLUSH_MS", "soon", ValueError, "AWA_COMPLETION_FLUSH_MS must be a number"),
        ("AWA_COMPLETION_FLUSH_MS", "nan", ValueError, "AWA_COMPLETION_FLUSH_MS"),
        ("AWA_COMPLETION_FLUSH_MS", "-1", ValueError, "AWA_COMPLETION_FLUSH_MS"),
    ],
)
def test_completion_batching_refuses_a_bad_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, error: type[Exception], message: str
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(error, match=message):
        parse_start_args(None, handler_queues=H)


def test_the_leader_lease_defaults_to_six_seconds_and_refuses_a_too_short_one() -> None:
    assert parse_start_args(None, handler_queues={"q"}).leader_lease_ttl == 6.0
    assert (
        parse_start_args(None, handler_queues={"q"}, leader_lease_ttl_ms=900).leader_lease_ttl
        == 0.9
    )
    with pytest.raises(ValidationError, match="leader_lease_ttl_ms: must be at least 200 ms"):
        parse_start_args(None, handler_queues={"q"}, leader_lease_ttl_ms=50)
