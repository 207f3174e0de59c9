"""Queue stripes: naming, validation and where a producer puts each job."""

from __future__ import annotations

import pytest

from awa.domain.errors import ValidationError
from awa.domain.job import JobSpec
from awa.domain.stripes import (
    FIELD,
    MAX_QUEUE_STRIPES,
    StripeRotor,
    is_stripe_name,
    siphash,
    stripe_for_unique_key,
    stripe_queues,
    stripe_specs,
    validate_stripe_count,
)


@pytest.mark.parametrize("value", [1, 2, 7, MAX_QUEUE_STRIPES])
def test_stripe_counts_in_range_are_accepted(value: int) -> None:
    assert validate_stripe_count(value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_QUEUE_STRIPES + 1, 2**32])
def test_stripe_counts_out_of_range_raise_a_validation_error_naming_the_field(
    value: int,
) -> None:
    with pytest.raises(ValidationError, match=FIELD) as info:
        validate_stripe_count(value)
    assert info.value.field == "queue_storage_queue_stripe_count"
    assert info.value.value == value


@pytest.mark.parametrize("value", [0, -3])
def test_too_few_stripes_say_must_be_above_zero_as_awa_pg_does(value: int) -> None:
    with pytest.raises(ValueError, match=f"{FIELD} must be > 0"):
        validate_stripe_count(value)


def test_too_many_stripes_name_the_ceiling() -> None:
    with pytest.raises(ValidationError, match=f"{FIELD} must be at most {MAX_QUEUE_STRIPES}"):
        validate_stripe_count(MAX_QUEUE_STRIPES + 1)


@pytest.mark.parametrize("value", [True, 2.0, "2", None])
def test_stripe_counts_of_the_wrong_type_raise_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=FIELD):
        validate_stripe_count(value)


@pytest.mark.parametrize(
    ("queue", "is_stripe"),
    [
        ("q", False),
        ("q#0", True),
        ("q#12", True),
        ("h#00", True),
        ("x#+1", True),
        ("#3", True),
        ("a#b#1", True),
        ("x#18446744073709551615", True),
        ("x#18446744073709551616", False),
        ("h#x", False),
        ("h#", False),
        ("#", False),
        ("x#-1", False),
        ("x# 1", False),
        ("x#\u0661", False),
    ],
)
def test_a_name_already_naming_a_stripe_is_recognised(queue: str, is_stripe: bool) -> None:
    assert is_stripe_name(queue) is is_stripe


def test_physical_queues_of_a_logical_queue() -> None:
    assert stripe_queues("q", 1) == ["q"]
    assert stripe_queues("q", 3) == ["q#0", "q#1", "q#2"]
    assert stripe_queues("q#1", 3) == ["q#1"]
    assert stripe_queues("h#x", 2) == ["h#x#0", "h#x#1"]


def test_siphash_matches_the_reference_vectors() -> None:
    # The SipHash paper's vectors are for SipHash-2-4 with key 00..0f; SipHash-1-3 is the
    # same construction with fewer rounds, so check the construction with 2-4 rounds too.
    k0 = int.from_bytes(bytes(range(8)), "little")
    k1 = int.from_bytes(bytes(range(8, 16)), "little")
    assert siphash(b"", k0, k1, c_rounds=2, d_rounds=4) == 0x726FDB47DD0E0E31
    assert siphash(bytes(range(15)), k0, k1, c_rounds=2, d_rounds=4) == 0xA129CA6149BE45E5
    assert siphash(bytes(range(8)), k0, k1, c_rounds=2, d_rounds=4) == 0x93F5F5799A932462


@pytest.mark.parametrize(
    ("unique_key", "stripe"),
    [
        # Placements observed with the original implementation at 7 stripes.
        ("87c4201c64f7a70c08c20fe6bd0e1187", 0),
        ("6d24b64a1f7847c0f0a492991eeb8d65", 1),
        ("6d5ba18ee9e50e7d10a43f6f82abee8a", 2),
        ("1a641fe9815284426965bfccd7d19d7f", 3),
        ("0be810fd1e0d59df1021afaeaa25fea8", 4),
        ("52e5e960084a46d2cc3009a414bbf7f0", 5),
        ("ab0064f9b1a4941082b495b7553199c9", 6),
    ],
)
def test_a_unique_job_goes_to_the_stripe_of_its_key(unique_key: str, stripe: int) -> None:
    assert stripe_for_unique_key(bytes.fromhex(unique_key), 7) == stripe


def test_plain_jobs_go_round_robin_from_the_rotor() -> None:
    rotor = StripeRotor()
    first = stripe_specs([JobSpec(kind="k", queue="q") for _ in range(3)], 2, rotor)
    assert [s.queue for s in first] == ["q#0", "q#1", "q#0"]
    # The next call continues where the last one stopped, so single inserts spread too.
    assert [s.queue for s in stripe_specs([JobSpec(kind="k", queue="q")], 2, rotor)] == ["q#1"]
    assert [s.queue for s in stripe_specs([JobSpec(kind="k", queue="q")], 2, rotor)] == ["q#0"]


def test_unique_jobs_keep_their_stripe_and_stripe_names_are_left_alone() -> None:
    rotor = StripeRotor()
    key = bytes.fromhex("ab0064f9b1a4941082b495b7553199c9")
    specs = [
        JobSpec(kind="k", queue="u", unique_key=key),
        JobSpec(kind="k", queue="u#3"),
        JobSpec(kind="k", queue="other"),
    ]
    out = stripe_specs(specs, 7, rotor)
    assert [s.queue for s in out] == ["u#6", "u#3", "other#2"]
    assert out[0].unique_key == key and out[2].kind == "k"


def test_one_stripe_renames_nothing() -> None:
    specs = [JobSpec(kind="k", queue="q"), JobSpec(kind="k", queue="q", unique_key=b"x")]
    assert stripe_specs(specs, 1, StripeRotor()) == specs
