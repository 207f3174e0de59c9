"""Unique-key options and key material layout."""

from __future__ import annotations

import hashlib
import struct

import pytest

from awa.domain import ValidationError
from awa.domain.states import DEFAULT_UNIQUE_STATES
from awa.domain.unique import (
    UNIQUE_KEY_LENGTH,
    UniqueOpts,
    canonical_json,
    derive_unique_key,
    unique_key_material,
)


def test_material_is_just_the_kind_when_nothing_else_is_keyed() -> None:
    assert unique_key_material("send_email", queue=None, args=None, period_bucket=None) == (
        b"send_email"
    )


def test_material_layout_with_every_part() -> None:
    material = unique_key_material(
        "send_email", queue="mail", args={"b": 1, "a": [1, "é"]}, period_bucket=3
    )
    expected = (
        b"send_email"
        + b"\x00mail"
        + b"\x00"
        + '{"a":[1,"é"],"b":1}'.encode()
        + b"\x00"
        + b"\x03\x00\x00\x00\x00\x00\x00\x00"
    )
    assert material == expected


def test_material_parts_are_optional_independently() -> None:
    assert unique_key_material("k", queue="q", args=None, period_bucket=None) == b"k\x00q"
    assert unique_key_material("k", queue=None, args=[], period_bucket=None) == b"k\x00[]"
    assert unique_key_material("k", queue=None, args=None, period_bucket=-1) == (
        b"k\x00" + struct.pack("<q", -1)
    )


def test_canonical_json_sorts_keys_and_is_compact() -> None:
    assert canonical_json({"b": {"d": 1, "c": 2}, "a": None}) == b'{"a":null,"b":{"c":2,"d":1}}'


def test_key_order_of_args_does_not_change_the_material() -> None:
    one = unique_key_material("k", queue=None, args={"x": 1, "y": 2}, period_bucket=None)
    two = unique_key_material("k", queue=None, args={"y": 2, "x": 1}, period_bucket=None)
    assert one == two


def test_derive_unique_key_truncates_the_digest_to_16_bytes() -> None:
    def digest(data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    key = derive_unique_key(digest, "k", queue="q", args={"a": 1}, period_bucket=None)
    assert len(key) == UNIQUE_KEY_LENGTH == 16
    assert key == hashlib.sha256(b'k\x00q\x00{"a":1}').digest()[:16]


def test_by_period_is_the_callers_bucket_value() -> None:
    assert UniqueOpts.from_dict({"by_period": 0}).by_period == 0
    with pytest.raises(ValidationError, match="between 0 and") as info:
        UniqueOpts.from_dict({"by_period": -5})  # a negative time bucket is a mistake
    assert info.value.field == "unique_opts.by_period"
    same = unique_key_material("k", queue=None, args=None, period_bucket=481_234)
    assert same == unique_key_material("k", queue=None, args=None, period_bucket=481_234)
    assert same != unique_key_material("k", queue=None, args=None, period_bucket=481_235)


def test_unique_opts_defaults() -> None:
    opts = UniqueOpts.from_dict({})
    assert opts == UniqueOpts(by_queue=False, by_args=True, by_period=None)
    assert opts.states == DEFAULT_UNIQUE_STATES


def test_unique_opts_from_dict() -> None:
    opts = UniqueOpts.from_dict({"by_queue": True, "by_args": False, "by_period": 60, "states": 3})
    assert opts == UniqueOpts(by_queue=True, by_args=False, by_period=60, states=3)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"by_kind": True}, "unique_opts"),
        ({"by_period": True}, "unique_opts.by_period"),
        ({"by_period": 1.5}, "unique_opts.by_period"),
        ({"by_period": -1}, "unique_opts.by_period"),
        ({"by_args": "yes"}, "unique_opts.by_args"),
        ({"by_args": 1}, "unique_opts.by_args"),
        ({"by_queue": "no"}, "unique_opts.by_queue"),
        ({"states": 256}, "unique_opts.states"),
        ({"states": -1}, "unique_opts.states"),
        ({"states": "11111000"}, "unique_opts.states"),
    ],
)
def test_unique_opts_refusals_name_the_field(opts: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        UniqueOpts.from_dict(opts)
    assert info.value.field == field
