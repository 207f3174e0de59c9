"""``mypy --strict`` catches a user's typing mistakes with the client: a handler for
another args class, a handler taking no job, a misspelt queue-config key, and attribute
access on the job ``insert()`` returned (its ``args`` is the stored JSON object, a dict).

The right uses below are checked by the suite's own ``mypy --strict`` run (``assert_type``);
the wrong ones are written to a file and checked with mypy's API, which must report each
of them on its line."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
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


def test_the_right_uses_build_and_register() -> None:
    client = build_client()
    assert client.handler_queues() == ["default", "media"]


WRONG = """\
import attrs

import awa


@attrs.define
class A:
    x: int


@attrs.define
class B:
    y: int


client = awa.AsyncClient("postgresql://localhost/app")


@client.task(A)
async def for_another_class(job: awa.Job[B]) -> None:  # line 19
    pass


@client.task(A)
async def takes_no_job() -> None:  # line 24
    pass


async def main() -> None:
    await client.start([{"name": "default", "max_wokers": 4}])  # line 30
    job = await client.insert(A(x=1))
    print(job.args.y)  # line 32
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
    assert set(errors) == {19, 24, 30, 32}, stdout + stderr
    assert 'expected "Callable[[Job[A]]' in errors[19] and "Job[B]" in errors[19]
    assert 'incompatible type "Callable[[]' in errors[24]
    assert "QueueConfigDict" in errors[30]
    assert 'has no attribute "y"' in errors[32]
