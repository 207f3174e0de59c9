"""No silent options: every keyword of ``AsyncClient.start()`` and every option of
``awa worker`` does something, is refused, or warns that it has no effect.

Each table below must name every keyword / option the signature has, so a new one that
nobody wired fails here until it is given an effect, a refusal or a warning.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import types
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from awa.domain.errors import ValidationError
from awa.domain.keywords import keywords_of
from awa.entrypoints import client_async, logs
from awa.entrypoints.cli import cli
from awa.entrypoints.client import AsyncClient, Client, RawClient
from awa.entrypoints.client_async import ClientStartOptions
from awa.entrypoints.environment import LISTEN_URL_ENV
from awa.entrypoints.health import HEALTH_ADDR_ENV
from awa.runtime.config import NO_EFFECT, RuntimeConfig, parse_start_args
from awa.testing import memory_client

#: The worker command's module (as an attribute, ``awa.entrypoints.cli.worker`` is the
#: command).
worker_cli = importlib.import_module("awa.entrypoints.cli.worker")
AWA_ROOT = Path(__file__).resolve().parents[2] / "awa"
QUEUES: list[dict[str, Any]] = [{"name": "q"}]


@attrs.frozen
class Effect:
    """Passing ``value`` sets ``field`` of the runtime config to ``expected``."""

    value: Any
    field: str
    expected: Any


START_EFFECTS: dict[str, Effect] = {
    "poll_interval_ms": Effect(500, "poll_interval", 0.5),
    "completion_batch_size": Effect(64, "completion_batch_size", 64),
    "completion_flush_ms": Effect(5, "completion_flush_interval", 0.005),
    "global_max_workers": Effect(4, "global_max_workers", 4),
    "completed_retention_hours": Effect(5, "completed_retention", timedelta(hours=5)),
    "failed_retention_hours": Effect(6, "failed_retention", timedelta(hours=6)),
    "descriptor_retention_days": Effect(3, "descriptor_retention", timedelta(days=3)),
    "cleanup_batch_size": Effect(7, "cleanup_batch_size", 7),
    "leader_election_interval_ms": Effect(1500, "leader_election_interval", 1.5),
    "leader_lease_ttl_ms": Effect(2500, "leader_lease_ttl", 2.5),
    "heartbeat_interval_ms": Effect(2500, "heartbeat_interval", 2.5),
    "promote_interval_ms": Effect(750, "promote_interval", 0.75),
    "heartbeat_rescue_interval_ms": Effect(3500, "heartbeat_rescue_interval", 3.5),
    "heartbeat_staleness_ms": Effect(4500, "heartbeat_staleness", timedelta(seconds=4.5)),
    "deadline_rescue_interval_ms": Effect(5500, "deadline_rescue_interval", 5.5),
    "callback_rescue_interval_ms": Effect(6500, "callback_rescue_interval", 6.5),
    "queue_storage_schema": Effect("side", "queue_storage_schema", "side"),
    "queue_storage_queue_stripe_count": Effect(2, "queue_storage_queue_stripe_count", 2),
    "queue_storage_queue_rotate_interval_ms": Effect(
        2000, "queue_storage_queue_rotate_interval", 2.0
    ),
    "queue_storage_lease_rotate_interval_ms": Effect(
        500, "queue_storage_lease_rotate_interval", 0.5
    ),
    "storage_transition_role": Effect(
        "canonical_drain", "storage_transition_role", "canonical_drain"
    ),
}
#: Ring sizes are fixed when queue storage is installed: any other value is refused.
START_REFUSED = {
    "queue_storage_queue_slot_count": 4,
    "queue_storage_lease_slot_count": 4,
    "queue_storage_claim_slot_count": 4,
}
#: Accepted for awa-pg compatibility; passing one warns that it has no effect.
START_WARNED = set(NO_EFFECT)
#: Used by ``start()`` itself rather than the runtime config, and why.
START_OWN = {
    "queues": "the queues served (tests/unit/test_runtime_config.py)",
    "only_listed_queues": "serve a subset of the handler queues (test below)",
    "health_addr": "the health listener's address (tests/unit/test_health_listener.py)",
    "listen_database_url": "where wake-ups listen (tests/integration/test_pooler.py)",
}


def _start_keywords() -> set[str]:
    keywords = set(inspect.signature(AsyncClient.start).parameters) - {"self", "options"}
    return keywords | keywords_of(ClientStartOptions)


@functools.cache
def _attributes_read_outside_config() -> frozenset[str]:
    """Every attribute name read in the runtime and the entrypoints, the config module
    (which builds the fields) aside."""
    config_module = AWA_ROOT / "runtime" / "config.py"
    names: set[str] = set()
    for root in (AWA_ROOT / "runtime", AWA_ROOT / "entrypoints"):
        for path in root.rglob("*.py"):
            if path == config_module:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute):
                    names.add(node.attr)
    return frozenset(names)


def test_every_start_keyword_is_accounted_for() -> None:
    tables = [set(START_EFFECTS), set(START_REFUSED), START_WARNED, set(START_OWN)]
    listed = set().union(*tables)
    assert sum(len(t) for t in tables) == len(listed), "a keyword is in two tables"
    assert listed == _start_keywords()


def test_only_the_async_clients_run_workers() -> None:
    assert not hasattr(Client, "start")
    assert RawClient.start is AsyncClient.start


@pytest.mark.anyio
async def test_start_forwards_every_keyword_it_does_not_use_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def spy(queues: Any, **kwargs: Any) -> RuntimeConfig:
        received.update(kwargs, queues=queues)
        raise Stop

    monkeypatch.setattr(client_async, "parse_start_args", spy)
    own = {"health_addr", "listen_database_url"}
    sentinels: dict[str, Any] = {name: object() for name in _start_keywords() - own}
    client = memory_client()
    with pytest.raises(Stop):
        await client.start(**sentinels)
    for name, sentinel in sentinels.items():
        assert received.get(name) is sentinel, f"start() drops {name}"


@pytest.mark.parametrize("keyword", sorted(START_EFFECTS))
def test_each_start_keyword_changes_a_config_field_the_runtime_reads(keyword: str) -> None:
    effect = START_EFFECTS[keyword]
    default = parse_start_args(QUEUES, handler_queues={"q"})
    options: dict[str, Any] = {keyword: effect.value}
    changed = parse_start_args(QUEUES, handler_queues={"q"}, **options)
    assert getattr(changed, effect.field) == effect.expected
    assert getattr(default, effect.field) != effect.expected
    assert effect.field in _attributes_read_outside_config(), (
        f"nothing reads RuntimeConfig.{effect.field}"
    )


@pytest.mark.parametrize("keyword", sorted(START_REFUSED))
def test_each_fixed_start_keyword_is_refused_naming_it(keyword: str) -> None:
    options: dict[str, Any] = {keyword: START_REFUSED[keyword]}
    with pytest.raises(ValidationError) as refused:
        parse_start_args(QUEUES, handler_queues={"q"}, **options)
    assert refused.value.field == keyword
    assert keyword in str(refused.value)


@pytest.mark.parametrize("keyword", sorted(START_WARNED))
def test_each_compatibility_keyword_warns_and_is_still_checked(keyword: str) -> None:
    options: dict[str, Any] = {keyword: 500}
    with pytest.warns(UserWarning, match=f"{keyword} has no effect"):
        config = parse_start_args(QUEUES, handler_queues={"q"}, **options)
    assert config == parse_start_args(QUEUES, handler_queues={"q"})
    bad: dict[str, Any] = {keyword: "soon"}
    with pytest.warns(UserWarning), pytest.raises(TypeError, match=keyword):
        parse_start_args(QUEUES, handler_queues={"q"}, **bad)


def test_only_listed_queues_changes_which_queues_are_served() -> None:
    listed = parse_start_args([("q", 1)], handler_queues={"q", "r"}, only_listed_queues=True)
    assert [q.name for q in listed.queues] == ["q"]
    with pytest.raises(ValueError, match="every queue with a registered handler"):
        parse_start_args([("q", 1)], handler_queues={"q", "r"})


# ------------------------------------------------------------------ awa worker


@attrs.define
class WorkerRun:
    imported: list[str] = attrs.field(factory=list)
    served: list[dict[str, Any]] = attrs.field(factory=list)
    configured: list[tuple[str, str]] = attrs.field(factory=list)
    supervised: list[tuple[list[str], int, dict[str, str]]] = attrs.field(factory=list)


def _run_worker(monkeypatch: pytest.MonkeyPatch, *args: str) -> WorkerRun:
    run = WorkerRun()

    def import_user_module(name: str) -> types.ModuleType:
        run.imported.append(name)
        return types.ModuleType(name)

    async def serve(
        module: types.ModuleType,
        database_url: str | None,
        queues: list[tuple[str, int]],
        shutdown_timeout_ms: int,
        health_addr: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        run.served.append(
            {
                "module": module.__name__,
                "queues": list(queues),
                "shutdown_timeout_ms": shutdown_timeout_ms,
                "health_addr": health_addr,
                "listen_url": listen_url,
            }
        )

    def supervise(argv: list[str], processes: int, env: dict[str, str]) -> int:
        run.supervised.append((argv, processes, env))
        return 0

    monkeypatch.setattr(worker_cli, "import_user_module", import_user_module)
    monkeypatch.setattr(worker_cli, "serve", serve)
    monkeypatch.setattr(worker_cli, "supervise", supervise)
    monkeypatch.setattr(logs, "configure", lambda level, fmt: run.configured.append((level, fmt)))
    result = CliRunner().invoke(
        cli,
        ["worker", *args],
        env={
            "DATABASE_URL": None,
            HEALTH_ADDR_ENV: None,
            LISTEN_URL_ENV: None,
            logs.LEVEL_ENV: None,
        },
    )
    assert result.exit_code == 0, result.output
    return run


#: For each ``awa worker`` option: the arguments that set it (besides ``--module m``) and
#: what one worker process then does with it.
WORKER_EFFECTS: dict[str, tuple[list[str], Callable[[WorkerRun], bool]]] = {
    "module_name": ([], lambda r: r.imported == ["m"] and r.served[0]["module"] == "m"),
    "queue_specs": (["-q", "mail:3"], lambda r: r.served[0]["queues"] == [("mail", 3)]),
    "processes": (["--processes", "3"], lambda r: r.supervised[0][1] == 3 and not r.served),
    "shutdown_timeout_ms": (
        ["--shutdown-timeout-ms", "1234"],
        lambda r: r.served[0]["shutdown_timeout_ms"] == 1234,
    ),
    "health_addr": (
        ["--health-addr", "127.0.0.1:0"],
        lambda r: r.served[0]["health_addr"] == "127.0.0.1:0",
    ),
    "listen_url": (
        ["--listen-database-url", "postgresql://direct/db"],
        lambda r: r.served[0]["listen_url"] == "postgresql://direct/db",
    ),
    "log_level": (["--log-level", "debug"], lambda r: r.configured[0][0] == "debug"),
    "log_format": (["--log-format", "json"], lambda r: r.configured[0][1] == "json"),
}


def test_every_worker_option_is_accounted_for() -> None:
    # The global options (--database-url, --json, ...) that every command also accepts
    # are the root group's and are not passed to the command.
    own = {p.name for p in worker_cli.worker.params if p.expose_value}
    assert set(WORKER_EFFECTS) == own


@pytest.mark.parametrize("option", sorted(WORKER_EFFECTS))
def test_each_worker_option_reaches_the_worker(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, took_effect = WORKER_EFFECTS[option]
    run = _run_worker(monkeypatch, "--module", "m", *args)
    assert took_effect(run), run


def test_every_worker_option_reaches_each_supervised_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = [arg for option in sorted(WORKER_EFFECTS) for arg in WORKER_EFFECTS[option][0]]
    args = [a for a in args if a not in ("--processes", "3")]
    target = "postgresql://app@db.example/app"
    run = _run_worker(
        monkeypatch, "--database-url", target, "--module", "m", "--processes", "2", *args
    )
    ((argv, count, env),) = run.supervised
    assert count == 2
    child = argv[argv.index("worker") + 1 :]
    assert child == [
        "--module",
        "m",
        "--queue",
        "mail:3",
        "--processes",
        "1",
        "--shutdown-timeout-ms",
        "1234",
    ]
    assert env[HEALTH_ADDR_ENV] == "127.0.0.1:0"
    assert env[logs.LEVEL_ENV] == "debug"
    assert env[logs.FORMAT_ENV] == "json"
    assert env["DATABASE_URL"] == target
