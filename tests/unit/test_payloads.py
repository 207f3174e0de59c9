"""Typed job payloads round-trip through one converter, and strict rebuilding names the
offending field."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import attrs
import pydantic
import pytest

import awa
import awa.testing
from awa.entrypoints import payloads
from awa.entrypoints.args import rebuild_args, serialize_args


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.define
class Addr:
    street: str
    zip: str | None = None


class Line(pydantic.BaseModel):
    sku: str
    qty: int


@dataclasses.dataclass
class Customer:
    name: str
    since: date
    addr: Addr


@dataclasses.dataclass
class Order:
    when: datetime
    addr: Addr
    customer: Customer
    day: date
    at: time
    id: uuid.UUID
    total: Decimal
    color: Color
    level: Level
    lines: list[Line]
    tags: set[str]
    extra: list[Addr] | None = None
    notes: dict[str, Decimal] = dataclasses.field(default_factory=dict)
    blob: bytes = b""
    previous: Order | None = None


def an_order(**changes: Any) -> Order:
    order = Order(
        when=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        addr=Addr("1 Main St"),
        customer=Customer("Ada", date(2020, 5, 1), Addr("2 Side St", "9")),
        day=date(2026, 1, 1),
        at=time(12, 30),
        id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        total=Decimal("10.10"),
        color=Color.RED,
        level=Level.HIGH,
        lines=[Line(sku="a", qty=2), Line(sku="b", qty=1)],
        tags={"x"},
        extra=[Addr("3 Far Rd")],
        notes={"tax": Decimal("0.21")},
        blob=b"\x00\xff",
    )
    return dataclasses.replace(order, **changes)


def round_trip(value: Any, cls: type[Any]) -> Any:
    _, payload = serialize_args(value, None)
    # What the database stores and hands back is JSON text.
    return rebuild_args(cls, json.loads(json.dumps(payload)))


def test_a_nested_payload_round_trips() -> None:
    order = an_order(previous=an_order(extra=None, color=Color.BLUE))
    back = round_trip(order, Order)
    assert back == order
    assert isinstance(back.when, datetime) and back.when.tzinfo is not None
    assert isinstance(back.addr, Addr) and isinstance(back.customer.addr, Addr)
    assert isinstance(back.lines[0], Line) and isinstance(back.previous, Order)
    assert back.previous.extra is None


def test_attrs_and_pydantic_top_level_args() -> None:
    assert round_trip(Addr("x", "1"), Addr) == Addr("x", "1")
    assert serialize_args(Addr("x"), None)[0] == "addr"
    assert round_trip(Line(sku="s", qty=3), Line) == Line(sku="s", qty=3)


def test_json_forms_are_plain() -> None:
    _, payload = serialize_args(an_order(), None)
    assert payload["when"] == "2026-01-02T03:04:05.000006+00:00"
    assert payload["total"] == "10.10" and payload["notes"] == {"tax": "0.21"}
    assert payload["color"] == "red" and payload["level"] == 2
    assert payload["id"] == "12345678-1234-5678-1234-567812345678"
    assert payload["blob"] == "00ff" and payload["at"] == "12:30:00"
    assert payload["lines"] == [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p | {"surprise": 1}, "args: unknown field(s) surprise"),
        (lambda p: {k: v for k, v in p.items() if k != "day"}, "args.day: required field missing"),
        (
            lambda p: p | {"customer": p["customer"] | {"addr": {"street": "s", "zipp": "1"}}},
            "args.customer.addr: unknown field(s) zipp",
        ),
        (
            lambda p: p | {"customer": {"name": "n", "since": "2020-01-01"}},
            "args.customer.addr: required field missing",
        ),
        (lambda p: p | {"lines": [{"sku": "a", "qty": "many"}]}, "args.lines[0].qty:"),
        (lambda p: p | {"when": "yesterday"}, "args.when:"),
        (lambda p: p | {"color": "green"}, "args.color:"),
        (lambda p: p | {"extra": [{"street": "s"}, {"zip": "1"}]}, "args.extra[1].street:"),
    ],
)
def test_bad_payloads_name_the_field(change: Any, message: str) -> None:
    _, payload = serialize_args(an_order(), None)
    with pytest.raises(awa.ValidationError) as raised:
        rebuild_args(Order, change(json.loads(json.dumps(payload))))
    assert message in str(raised.value)
    assert raised.value.field == "args"


def test_dict_args_and_untyped_handlers_keep_the_raw_value() -> None:
    assert rebuild_args(dict, {"a": 1}) == {"a": 1}
    assert rebuild_args(None, {"a": 1}) == {"a": 1}


def test_one_encoder_strict_for_payloads_lenient_for_output() -> None:
    with pytest.raises(awa.ValidationError, match=r"not JSON-serialisable \(object\)"):
        payloads.to_json_value({"x": object()})
    text = payloads.dumps({"at": datetime(2026, 1, 1, tzinfo=UTC), "key": b"\x01", "o": 1j})
    assert json.loads(text) == {"at": "2026-01-01T00:00:00+00:00", "key": "01", "o": "1j"}


@pytest.mark.anyio
async def test_a_handler_receives_the_nested_payload_rebuilt() -> None:
    client = awa.testing.memory_client()
    received: list[Order] = []

    @client.task(Order)
    def handle(job: awa.Job[Order]) -> None:
        received.append(job.args)

    order = an_order()
    await client.insert(order)
    await client.insert({"when": "later"}, kind="order")
    results = await awa.testing.drain(client)
    assert [r.outcome for r in results] == ["completed", "failed"]
    assert received == [order]
    assert results[1].error is not None and "args.addr: required field missing" in results[1].error
