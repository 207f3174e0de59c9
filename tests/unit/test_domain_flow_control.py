"""Per-key concurrency: the key and limit refused when bad, and the claim's rule."""

from __future__ import annotations

import math

import pytest

from awa.domain import ValidationError
from awa.domain.flow_control import (
    MAX_CONCURRENCY_KEY_BYTES,
    MAX_KEY_WALKS,
    MAX_RUNNING_PER_KEY,
    KeyWindow,
    admit,
    held_back,
    holds_slot,
    running_by_key,
    validate_concurrency_key,
    validate_max_running_per_key,
)
from awa.domain.states import JobState


def _key(job: tuple[str, str | None]) -> str | None:
    return job[1]


# ---------------------------------------------------------------- validation


def test_a_key_is_kept_as_given_and_none_means_no_key() -> None:
    assert validate_concurrency_key("tenant-42") == "tenant-42"
    assert validate_concurrency_key("é" * 127) == "é" * 127
    assert validate_concurrency_key(None) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "must not be empty"),
        ("x" * 10_000, f"at most {MAX_CONCURRENCY_KEY_BYTES} bytes"),
        ("é" * 128, "got 256"),
        ("a\x00b", "NUL"),
        ("\ud800", "lone surrogates"),
        (42, "must be a string or None, got int"),
        (b"tenant", "got bytes"),
    ],
)
def test_a_bad_key_is_refused_naming_the_field(value: object, words: str) -> None:
    with pytest.raises(ValidationError, match=r"^concurrency_key: ") as caught:
        validate_concurrency_key(value)
    assert caught.value.field == "concurrency_key"
    assert words in str(caught.value)


def test_a_limit_is_a_positive_integer() -> None:
    assert validate_max_running_per_key(1) == 1
    assert validate_max_running_per_key(3.0) == 3
    assert validate_max_running_per_key(None) is None
    assert validate_max_running_per_key(MAX_RUNNING_PER_KEY) == MAX_RUNNING_PER_KEY


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "between 1 and"),
        (-1, "got -1"),
        (MAX_RUNNING_PER_KEY + 1, "between 1 and"),
        (math.nan, "got float"),
        (1.5, "got float"),
        (True, "got bool"),
        ("2", "got str"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field(value: object, words: str) -> None:
    with pytest.raises(ValidationError, match=r"^queue 'q': max_running_per_key: ") as caught:
        validate_max_running_per_key(value, "queue 'q': max_running_per_key")
    assert words in str(caught.value)


# ---------------------------------------------------------------- slots


def test_running_and_waiting_attempts_hold_slots_and_nothing_else_does() -> None:
    assert {s for s in JobState if holds_slot(s)} == {JobState.Running, JobState.WaitingExternal}
    held = running_by_key(
        [
            ("a", JobState.Running),
            ("a", JobState.WaitingExternal),
            ("a", JobState.Available),
            ("b", JobState.Completed),
            (None, JobState.Running),
        ]
    )
    assert held == {"a": 2}


# ---------------------------------------------------------------- the rule


def test_without_a_limit_the_first_candidates_are_taken_in_order() -> None:
    jobs = [(str(i), "hot") for i in range(5)]
    assert admit(jobs, key_of=_key, running={}, max_running_per_key=None, limit=3) == jobs[:3]


def test_a_key_gets_no_more_than_its_free_slots() -> None:
    jobs = [(str(i), "a") for i in range(5)]
    taken = admit(jobs, key_of=_key, running={"a": 1}, max_running_per_key=3, limit=10)
    assert taken == jobs[:2]
    assert admit(jobs, key_of=_key, running={"a": 3}, max_running_per_key=3, limit=10) == []


def test_claims_rotate_among_keys_a_backlog_does_not_starve_a_small_key() -> None:
    hot = [(f"hot{i}", "hot") for i in range(100)]
    small = [("small0", "small")]
    jobs = [*hot, *small]
    # Round one takes every key's first job: the small key's only job comes second.
    taken = admit(jobs, key_of=_key, running={}, max_running_per_key=50, limit=2)
    assert taken == [hot[0], small[0]]
    taken = admit(jobs, key_of=_key, running={}, max_running_per_key=50, limit=4)
    assert taken == [hot[0], small[0], hot[1], hot[2]]


def test_keyless_jobs_are_not_limited_and_rank_first() -> None:
    jobs = [("k1", "a"), ("k2", "a"), ("n1", None), ("n2", None)]
    taken = admit(jobs, key_of=_key, running={"a": 0}, max_running_per_key=1, limit=10)
    assert taken == [("k1", "a"), ("n1", None), ("n2", None)]


def test_no_limit_no_claim() -> None:
    assert admit([("1", "a")], key_of=_key, running={}, max_running_per_key=1, limit=0) == []


@pytest.mark.parametrize(
    ("running", "waiting", "limit", "held"),
    [
        (0, 5, None, 0),  # no limit holds nothing back
        (0, 5, 2, 3),
        (1, 5, 2, 4),
        (2, 5, 2, 5),
        (3, 5, 2, 5),  # a limit lowered below what runs
        (0, 1, 2, 0),
        (0, 0, 2, 0),
    ],
)
def test_held_back_is_what_waits_beyond_the_free_slots(
    running: int, waiting: int, limit: int | None, held: int
) -> None:
    assert held_back(running, waiting, limit) == held


# ---------------------------------------------------------------- the window of keys


def test_a_window_walks_past_keys_without_room() -> None:
    free = {"a": 0, "b": 1, "c": 0, "d": 2, "e": 1}
    window: KeyWindow[str] = KeyWindow(3)
    assert window.keys_to_walk() == 3
    window.add(["a", "b", "c"], 3, free.__getitem__)
    # two of the three places went to full keys: the next walk asks for two more
    assert window.keys_to_walk() == 2
    window.add(["d", "e"], 2, free.__getitem__)
    assert window.keys_to_walk() == 0
    assert window.with_room == ["b", "d", "e"]
    assert window.cursor == "e"


def test_a_window_ends_when_the_rotation_runs_out_of_keys() -> None:
    window: KeyWindow[str] = KeyWindow(4)
    window.add(["a", "b"], 4, {"a": 0, "b": 1}.__getitem__)
    assert window.exhausted
    assert window.keys_to_walk() == 0
    assert window.with_room == ["b"]
    assert window.cursor == "b"


def test_a_window_walks_a_bounded_number_of_times() -> None:
    window: KeyWindow[int] = KeyWindow(2)
    walks = 0
    while (wanted := window.keys_to_walk()) > 0:
        start = len(window.walked)
        window.add(list(range(start, start + wanted)), wanted, lambda key: 0)
        walks += 1
    assert walks == MAX_KEY_WALKS
    assert window.with_room == []
    assert window.cursor == 2 * MAX_KEY_WALKS - 1


def test_an_empty_rotation_keeps_the_cursor() -> None:
    window: KeyWindow[str] = KeyWindow(2)
    window.add([], 2, lambda key: 1)
    assert window.keys_to_walk() == 0
    assert window.cursor is None
