"""Pure parts of the admin web: the read cache, search parsing, and settings."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from awa.domain.errors import ValidationError
from awa.entrypoints.web import charts
from awa.entrypoints.web.cache import ReadCache
from awa.entrypoints.web.config import is_loopback, parse_color, parse_peer, parse_secret
from awa.entrypoints.web.pages import parse_search
from awa.entrypoints.web.render import human, label

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_cache_serves_within_ttl_coalesces_and_invalidates() -> None:
    clock = Clock()
    cache = ReadCache(5.0, clock=clock)
    calls = 0
    loaded = {n: asyncio.Event() for n in range(1, 5)}

    async def load() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)  # a load that awaits: the other reads find it under way
        # set as the load returns: the cache keeps the value in the same step
        loaded[calls].set()
        return calls

    first = await asyncio.gather(*(cache.get("k", load) for _ in range(5)))
    assert first == [1] * 5 and calls == 1
    clock.now = 4.9
    assert await cache.get("k", load) == 1 and calls == 1
    # Stale but young: served at once while one refresh runs.
    clock.now = 6.0
    assert await cache.get("k", load) == 1
    await loaded[2].wait()  # the one background refresh
    assert calls == 2 and await cache.get("k", load) == 2
    cache.invalidate()
    assert await cache.get("k", load) == 3
    clock.now = 100.0
    assert await cache.get("k", load) == 4


async def test_cache_with_zero_ttl_always_loads() -> None:
    cache = ReadCache(0.0)
    values = iter(range(10))

    async def load() -> int:
        return next(values)

    assert [await cache.get("k", load) for _ in range(3)] == [0, 1, 2]


def test_parse_search() -> None:
    assert parse_search("kind:send_email  queue:mail tag:vip") == {
        "kind": "send_email",
        "queue": "mail",
        "tag": "vip",
    }
    assert parse_search("") == {}
    with pytest.raises(ValueError, match="kind:NAME"):
        parse_search("hello")
    with pytest.raises(ValueError):
        parse_search("owner:me")


def test_settings_validation() -> None:
    assert parse_secret("ab" * 32) == bytes([0xAB]) * 32
    assert parse_secret(None) is None
    with pytest.raises(ValidationError, match="32 bytes"):
        parse_secret("abcd")
    with pytest.raises(ValidationError, match="hex"):
        parse_secret("zz" * 32)
    assert parse_color("#ABC") == "#abc" and parse_color("#11223344") == "#11223344"
    for bad in ("red", "#12", "#12345", "112233"):
        with pytest.raises(ValidationError):
            parse_color(bad)
    assert parse_peer("eu=https://eu.example.test").url == "https://eu.example.test"
    for bad in ("eu", "=https://x", "eu=javascript:alert(1)", "eu=ftp://x"):
        with pytest.raises(ValidationError):
            parse_peer(bad)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


async def test_cache_keeps_a_bounded_number_of_keys() -> None:
    from awa.entrypoints.web import cache as cache_module

    clock = Clock()
    cache = ReadCache(5.0, clock=clock)

    async def load() -> int:
        return 1

    for index in range(cache_module.MAX_ENTRIES + 50):
        clock.now = index * 0.001
        await cache.get(f"k{index}", load)
    assert len(cache._values) == cache_module.MAX_ENTRIES
    assert "k0" not in cache._values and f"k{cache_module.MAX_ENTRIES + 49}" in cache._values


def test_values_read_as_words_not_python_reprs() -> None:
    assert human(None) == "—" and human([]) == "—" and human({}) == "—"
    assert human(True) == "yes" and human(False) == "no"
    assert human(0) == "0" and human("queue_storage") == "queue_storage"
    blockers = human(["finalize needs <mixed>", None])
    assert blockers == '<ul class="plain"><li>finalize needs &lt;mixed&gt;</li><li>—</li></ul>'
    assert human({"fresh_install": True}) == (
        '<dl class="inner"><dt>Fresh install</dt><dd>yes</dd></dl>'
    )
    assert label("can_finalize") == "Can finalize"


def test_chart_geometry_stacks_bars_and_breaks_lines() -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    minutes = [start + timedelta(minutes=i) for i in range(4)]
    assert [charts.nice_ceiling(v) for v in (0, 1, 3, 7, 11, 240)] == [1, 1, 5, 10, 20, 250]
    bars = charts.stacked_bars(minutes, {"b": [0, 2, 0, 1], "a": [1, 2, 0, 0]}, what="done")
    assert bars["total"] == 6 and bars["axis"][-1]["label"] == "5"
    assert [(r["series"], r["title"]) for r in bars["rects"]] == [
        (0, "12:00 UTC · a: 1 done"),
        (0, "12:01 UTC · a: 2 done"),
        (1, "12:01 UTC · b: 2 done"),
        (1, "12:03 UTC · b: 1 done"),
    ]
    a1, b1 = bars["rects"][1], bars["rects"][2]
    assert a1["height"] == b1["height"] and round(b1["y"] + b1["height"], 2) == a1["y"]
    assert [(q["name"], q["total"]) for q in bars["legend"]] == [("a", 3), ("b", 3)]
    drawn = charts.lines(minutes, {"q": [1.0, None, 3.0, 4.0]}, unit="s", what="lag")
    (line,) = drawn["lines"]
    assert len(line["paths"]) == 2 and len(line["dots"]) == 3
    assert drawn["legend"] == [{"name": "q", "series": 0, "total": "4s"}]
    empty = charts.lines(minutes, {"q": [None] * 4}, what="lag")
    assert empty["total"] == 0 and empty["legend"][0]["total"] is None
