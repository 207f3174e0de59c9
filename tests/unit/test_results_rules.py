"""Stored results outside the engines: the maintenance leader deletes expired results,
``task(store_result=...)`` takes only a bool, and the size cap is counted in JSON bytes."""

from __future__ import annotations

from typing import Any

import pytest

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.policies import NO_JITTER
from awa.domain.results import MAX_RESULT_BYTES, RESULT_RETENTION, encode_result
from awa.entrypoints.routing import inmemory_control_plane
from awa.runtime import parse_start_args
from awa.runtime.inflight import InFlight
from awa.runtime.maintenance_duties import MaintenanceDuties
from awa.testing import memory_client
from tests.unit.test_runtime_support import FAST

pytestmark = pytest.mark.anyio


async def test_the_leader_deletes_expired_results_only() -> None:
    clock = ManualClock()
    engine = InMemoryEngine(clock=clock, backoff=NO_JITTER)
    control = inmemory_control_plane(engine, clock)
    fences: list[int] = []
    config = parse_start_args(None, handler_queues={"mail"}, **FAST)
    duties = MaintenanceDuties(
        engine, config, InFlight(), fence=lambda: fences.append(1), clock=clock, control=control
    ).schedule()
    (duty,) = [d for d in duties if d.name == "result_cleanup"]
    await control.results.store_result(1, "1")
    clock.advance(RESULT_RETENTION / 2)
    await control.results.store_result(2, "2")
    clock.advance(RESULT_RETENTION / 2)
    clock.advance(1)
    await duty.run()
    assert fences == [1]
    assert await control.results.get_result(1) is None
    assert await control.results.prune_results(before=clock.now()) == 0  # already gone
    assert await control.results.get_result(2) is not None


def test_store_result_must_be_a_bool() -> None:
    client = memory_client()
    with pytest.raises(ValidationTypeError, match="store_result: must be True or False"):
        client.task(dict, store_result="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * MAX_RESULT_BYTES, f"is {MAX_RESULT_BYTES + 2} bytes of JSON, over the limit"),
        (float("nan"), "is not storable as JSON"),
        ({1j: 2}, "is not storable as JSON"),
    ],
)
def test_a_result_over_the_cap_or_not_json_is_refused(value: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        encode_result(value)
    assert encode_result("x" * (MAX_RESULT_BYTES - 2)) == '"' + "x" * (MAX_RESULT_BYTES - 2) + '"'
