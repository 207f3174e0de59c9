"""``mypy --strict`` catches a user's typing mistakes with the client: a handler for
another args class, a handler taking no job, a misspelt queue-config key, and attribute
access on the job ``insert()`` returned (its ``args`` is the stored JSON object, a dict).

The right uses below are checked by the suite's own ``mypy --strict`` run (``assert_type``);
the wrong ones are written to a file and checked with mypy's API, which must report each
of them on its line."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, assert_type

import attrs
import pytest

import awa
from awa import QueueConfigDict

ROOT = Path(__file__).resolve().parents[2]


@attrs.define
class Resize:
    width: int


def build_client() -> awa.AsyncClient:
    # Constructing a client opens no connection.
    client = awa.AsyncClient("postgresql://localhost/typing")

    @client.task(Resize, queue="media")
    async def resize(job: awa.Job[Resize]) -> None:
        assert_type(job.args.width, int)

    @client.task(Resize, kind="resize_sync")
    def resize_sync(job: awa.Job[Resize]) -> awa.Snooze | None:
        return None

    @client.task(dict, kind="raw")
    async def raw(job: awa.Job[dict[str, Any]]) -> None:
        pass

    # Every task option, as a type checker sees them (ADR 0027).
    @client.task(Resize, kind="stored", queue="media", retry=awa.RetryPolicy(), store_result=True)
    async def stored(job: awa.Job[Resize]) -> int:
        return job.args.width

    # The decorator hands the handler back with its own type.
    assert_type(resize, Callable[[awa.Job[Resize]], Coroutine[Any, Any, None]])
    return client


async def right_uses(client: awa.AsyncClient) -> None:
    # As awa-pg: the job insert() returns carries the stored JSON object as args.
    job = await client.insert(Resize(width=3), queue="media")
    assert_type(job, awa.Job[dict[str, Any]])
    assert_type(job.args["width"], Any)
    queues: list[QueueConfigDict] = [
        {"name": "media", "max_workers": 4, "rate_limit": (10.0, 5)},
        {"name": "bulk", "retention": None},
    ]
    await client.start(queues)
    await client.start([("media", 4), {"name": "bulk", "max_workers": 2}])
    # Every insert and start option, as a type checker sees them (ADR 0027).
    await client.insert(
        Resize(width=3),
        kind="resize",
        queue="media",
        priority=1,
        max_attempts=3,
        tags=["t"],
        metadata={"m": 1},
        run_at=datetime.now(UTC),
        unique_opts={"by_args": True},
        ordering_key=b"k",
        queue_storage_queue_stripe_count=1,
    )
    await client.enqueue_many_copy([Resize(width=1)], opts=[None], queue="media")
    await client.start(
        queues, poll_interval_ms=100, storage_transition_role="auto", health_addr="127.0.0.1:0"
    )


def test_the_right_uses_build_and_register() -> None:
    client = build_client()
    assert client.handler_queues() == ["default", "media"]
    assert "stored" in client._handlers


WRONG = """\
import attrs

import awa
from awa.bridge import insert_job


@attrs.define
class A:
    x: int


@attrs.define
class B:
    y: int


client = awa.AsyncClient("postgresql://localhost/app")


@client.task(A)  # line 20
async def for_another_class(job: awa.Job[B]) -> None:
    pass


@client.task(A)  # line 25
async def takes_no_job() -> None:
    pass


async def main() -> None:
    await client.start([{"name": "default", "max_wokers": 4}])  # line 31
    job = await client.insert(A(x=1))
    print(job.args.y)  # line 33
    await client.insert(A(x=1), queu="media")  # line 34
    await client.insert(A(x=1), priority="high")  # line 35
    await client.enqueue_many_copy([A(x=1)], unique_opts=["by_args"])  # line 36
    async with await client.transaction() as tx:
        await tx.insert_many([A(x=1)], unique_opts={"by_args": True})  # line 38
        await tx.insert(A(x=1), run_at=1700000000)  # line 39
    awa.Client("postgresql://localhost/app").insert(A(x=1), max_attempt=3)  # line 40
    await insert_job(object(), A(x=1), tags="urgent")  # line 41
    await client.start(poll_interval=200)  # line 42
    await client.start(storage_transition_role="drain")  # line 43
    client.periodic("p", "* * * * *", A, A(x=1), run_at="2030-01-01")  # line 44
    client.periodic("p", "* * * * *", A, A(x=1), timezone=0)  # line 45
    client.queue_descriptor("default", ownr="ops")  # line 46
    client.task(A, retyr=awa.RetryPolicy())  # line 47
    client.task(A, retry=3)  # line 48
    client.worker(A, store_result=True)  # line 49
"""


def test_mypy_reports_each_mistake_on_its_line(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "user_script.py"
    path.write_text(WRONG)
    stdout, stderr, _ = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(path),
        ]
    )
    errors = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"user_script\.py:(\d+): error: (.*)", stdout)
    }
    assert set(errors) == {20, 25, 31, *range(33, 50)} - {37}, stdout + stderr
    assert 'expected "Callable[[Job[A]]' in errors[20] and "Job[B]" in errors[20]
    assert 'incompatible type "Callable[[]' in errors[25]
    assert "QueueConfigDict" in errors[31]
    assert 'has no attribute "y"' in errors[33]
    # The insert and start options (one TypedDict each, ADR 0027): a misspelt keyword,
    # a keyword the entry point does not take and a value of the wrong type are each
    # reported, on the async and blocking clients, transactions and the bridge.
    for line, keyword in (
        (34, "queu"),
        (38, "unique_opts"),
        (40, "max_attempt"),
        (44, "run_at"),
        (46, "ownr"),
        (47, "retyr"),
        (49, "store_result"),
    ):
        assert f'Unexpected keyword argument "{keyword}"' in errors[line], errors[line]
    assert "poll_interval" in errors[42]
    for line, expected in (
        (35, '"int"'),
        (36, "dict[str, Any] | None"),
        (39, "datetime | str | None"),
        (41, "list[str] | tuple[str, ...] | None"),
        (43, "Literal["),
        (45, '"str"'),
        (48, "RetryPolicy | None"),
    ):
        assert "incompatible type" in errors[line] and expected in errors[line], errors[line]
