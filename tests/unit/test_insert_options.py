"""The insert options are declared once (``awa/entrypoints/insert_options.py``, ADR 0027):
every entry point takes exactly its TypedDict's keys, refuses any other keyword as a plain
signature would, and the defaults its documentation states are the domain's."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from awa import AsyncClient, Client, RawClient
from awa.domain.cron import DEFAULT_TIMEZONE, MissedFirePolicy
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa.domain.keywords import check_keywords, keywords_of
from awa.domain.stripes import DEFAULT_QUEUE_STRIPES
from awa.entrypoints import bridge, insert_options
from awa.entrypoints.client_descriptors import DescriptorOptions
from awa.entrypoints.insert_options import (
    BridgeOptions,
    ClientBulkInsertOptions,
    ClientInsertOptions,
    InsertOptions,
    JobOptions,
    PeriodicOptions,
    QueueingOptions,
    TransactionBulkInsertOptions,
)
from awa.entrypoints.transaction import SyncTransaction, Transaction
from awa.testing import memory_client

pytestmark = pytest.mark.anyio

#: A misspelt keyword, as a caller without a type checker might write it.
TYPO: dict[str, Any] = {"queu": "media"}


def test_the_sets_nest_as_the_entry_points_need() -> None:
    queueing = {"queue", "priority", "max_attempts", "tags", "metadata"}
    assert keywords_of(QueueingOptions) == queueing
    assert keywords_of(PeriodicOptions) == queueing | {"timezone", "missed_fire_policy"}
    job = keywords_of(JobOptions)
    assert {"kind", "queue", "priority", "max_attempts", "tags", "metadata"} <= job
    assert {"run_at", "ordering_key"} <= job
    assert keywords_of(InsertOptions) == job | {"unique_opts"}
    assert keywords_of(BridgeOptions) == job | {"unique_opts"}
    stripe = {"queue_storage_queue_stripe_count"}
    # A single insert may wait on parents (ADR 0032); a bulk insert may not.
    single = keywords_of(InsertOptions) | stripe | {"depends_on"}
    assert keywords_of(ClientInsertOptions) == single
    assert keywords_of(ClientBulkInsertOptions) == keywords_of(InsertOptions) | stripe | {"opts"}
    assert keywords_of(TransactionBulkInsertOptions) == job | stripe


def test_check_keywords_names_the_first_unknown_keyword_as_python_does() -> None:
    check_keywords("AsyncClient.insert", {"queue": "q", "priority": 1}, ClientInsertOptions)
    with pytest.raises(TypeError) as refused:
        check_keywords("AsyncClient.insert", {"queue": "q", "zz": 1, "aa": 2}, ClientInsertOptions)
    # awa-pg 0.6.9's wording, class and method.
    assert str(refused.value) == "AsyncClient.insert() got an unexpected keyword argument 'aa'"


async def test_the_async_client_refuses_an_unknown_keyword_and_writes_nothing() -> None:
    client = memory_client()
    with pytest.raises(
        TypeError, match=r"^AsyncClient\.insert\(\) got an unexpected keyword argument 'queu'$"
    ):
        await client.insert({"n": 1}, kind="k", **TYPO)
    for name in ("insert_many_copy", "enqueue_many_copy"):
        with pytest.raises(TypeError, match=rf"^AsyncClient\.{name}\(\) got .* argument 'queu'$"):
            await getattr(client, name)([{"n": 1}], kind="k", **TYPO)
    assert await client.list_jobs() == []
    # Every declared key is taken: this insert uses them all.
    job = await client.insert(
        {"n": 1},
        kind="k",
        queue="media",
        priority=3,
        max_attempts=4,
        tags=["t"],
        metadata={"m": 1},
        run_at="2030-01-01T00:00:00Z",
        unique_opts={"by_args": True},
        ordering_key="o",
        queue_storage_queue_stripe_count=DEFAULT_QUEUE_STRIPES,
    )
    assert (job.queue, job.priority, job.max_attempts, job.tags) == ("media", 3, 4, ["t"])
    await client.close()


async def test_the_bulk_inserts_refuse_unique_opts_only_where_awa_pg_does() -> None:
    tx = Transaction(object(), object(), _never_released)  # type: ignore[arg-type]
    options: dict[str, Any] = {"kind": "k", "unique_opts": {"by_args": True}}
    with pytest.raises(TypeError, match=r"^Transaction\.insert_many\(\) got .* 'unique_opts'$"):
        await tx.insert_many([{"n": 1}], **options)
    with pytest.raises(TypeError, match=r"^Transaction\.insert\(\) got .* argument 'opts'$"):
        await tx.insert({"n": 1}, kind="k", **{"opts": None})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^SyncTransaction\.insert\(\) got .* 'queu'$"):
        SyncTransaction(tx, _run_now).insert({"n": 1}, kind="k", **TYPO)


async def _never_released(conn: object) -> None:
    raise AssertionError("a refused keyword must not touch the connection")


def _run_now(coro: Any) -> Any:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the refusal must come before any await")


def test_the_blocking_client_refuses_an_unknown_keyword() -> None:
    with (
        Client("postgresql://localhost/never-reached") as client,
        pytest.raises(TypeError, match=r"^Client\.insert\(\) got .* argument 'queu'$"),
    ):
        client.insert({"n": 1}, kind="k", **TYPO)
    raw = RawClient("postgresql://localhost/never-reached")
    with pytest.raises(TypeError, match=r"^RawClient\.insert_sync\(\) got .* argument 'queu'$"):
        raw.insert_sync({"n": 1}, kind="k", **TYPO)
    assert raw._twin is None  # refused before the blocking twin was built


async def test_the_bridge_refuses_what_the_sql_producer_contract_cannot_store() -> None:
    parents: dict[str, Any] = {"depends_on": [1]}
    with pytest.raises(TypeError, match=r"^insert_job\(\) got .* argument 'depends_on'$"):
        await bridge.insert_job(object(), {"n": 1}, kind="k", **parents)
    with pytest.raises(TypeError, match=r"^insert_job_sync\(\) got .* argument 'queu'$"):
        bridge.insert_job_sync(object(), {"n": 1}, kind="k", **TYPO)


def test_periodic_takes_the_queueing_options_and_refuses_the_insert_only_ones() -> None:
    client = AsyncClient("postgresql://localhost/never-reached")
    client.periodic("p", "* * * * *", Beat, Beat(), queue="q", priority=3, timezone="UTC")
    schedule = client._schedules["p"]
    assert (schedule.queue, schedule.priority, schedule.timezone) == ("q", 3, "UTC")
    assert schedule.max_attempts == DEFAULT_MAX_ATTEMPTS
    run_at: dict[str, Any] = {"run_at": "2030-01-01T00:00:00Z"}
    with pytest.raises(TypeError, match=r"^AsyncClient\.periodic\(\) got .* 'run_at'$"):
        client.periodic("q", "* * * * *", Beat, Beat(), **run_at)
    assert "q" not in client._schedules


def test_the_descriptor_methods_take_one_declared_set() -> None:
    client = AsyncClient("postgresql://localhost/never-reached")
    client.queue_descriptor("q", display_name="Q", owner="ops", tags=["t"], extra={"a": 1})
    client.job_kind_descriptor("k", description="what k does", docs_url="https://example.org")
    assert client._queue_descriptors["q"].owner == "ops"
    assert client._kind_descriptors["k"].docs_url == "https://example.org"
    typo: dict[str, Any] = {"ownr": "ops"}
    for method in (client.queue_descriptor, client.job_kind_descriptor):
        with pytest.raises(TypeError, match=rf"^AsyncClient\.{method.__name__}\(\) got .* 'ownr'$"):
            method("x", **typo)
    assert "x" not in client._queue_descriptors and "x" not in client._kind_descriptors


@dataclasses.dataclass
class Beat:
    n: int = 0


async def test_start_refuses_a_tuning_knob_it_does_not_expose() -> None:
    client = memory_client()
    knob: dict[str, Any] = {"cleanup_interval_ms": 5}
    with pytest.raises(TypeError, match=r"^AsyncClient\.start\(\) got .* 'cleanup_interval_ms'$"):
        await client.start(**knob)


def test_the_entry_points_take_the_declared_options_and_nothing_else() -> None:
    takes: dict[Callable[..., Any], type[Any]] = {
        AsyncClient.insert: ClientInsertOptions,
        AsyncClient.insert_many_copy: ClientBulkInsertOptions,
        AsyncClient.enqueue_many_copy: ClientBulkInsertOptions,
        Client.insert: ClientInsertOptions,
        Transaction.insert: ClientInsertOptions,
        Transaction.insert_many: TransactionBulkInsertOptions,
        SyncTransaction.insert: ClientInsertOptions,
        bridge.insert_job: BridgeOptions,
        bridge.insert_job_sync: BridgeOptions,
        AsyncClient.periodic: PeriodicOptions,
        AsyncClient.queue_descriptor: DescriptorOptions,
        AsyncClient.job_kind_descriptor: DescriptorOptions,
    }
    for function, options in takes.items():
        params = list(inspect.signature(function).parameters.values())
        assert params[-1].kind is inspect.Parameter.VAR_KEYWORD, function
        assert params[-1].annotation == f"Unpack[{options.__name__}]", function
        assert all(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params), function


def test_the_defaults_the_options_document_are_the_domains() -> None:
    source = Path(insert_options.__file__).read_text(encoding="utf-8")
    documented: dict[str, str] = {}
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for field, doc in zip(cls.body, cls.body[1:], strict=False):
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                text = ast.literal_eval(doc.value) if isinstance(doc, ast.Expr) else ""
                if "absent: " in text:
                    documented[field.target.id] = text.rsplit("absent: ", 1)[1].rstrip(".")
    assert documented["queue"] == f'``"{DEFAULT_QUEUE}"``'
    assert documented["priority"] == str(DEFAULT_PRIORITY)
    assert documented["max_attempts"] == str(DEFAULT_MAX_ATTEMPTS)
    assert documented["queue_storage_queue_stripe_count"] == str(DEFAULT_QUEUE_STRIPES)
    assert documented["timezone"] == f'``"{DEFAULT_TIMEZONE}"``'
    assert documented["missed_fire_policy"] == f'``"{MissedFirePolicy.COALESCE.value}"``'
