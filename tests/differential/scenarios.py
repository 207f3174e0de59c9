"""Sequences of public calls whose observable results are compared across implementations.

Every scenario is ``async def scenario(awa, url) -> dict``: it gets the imported ``awa``
package under test and the URL of a fresh, migrated database, runs public calls only, and
returns what a caller could observe (exception types and messages, states, fields). Ids,
timestamps and other values that legitimately differ between runs are left out.

This module must import under both implementations, so it uses nothing but the standard
library and the ``awa`` module it is handed.
"""

# The package under test is handed in untyped, so its decorators are untyped too.
# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

Observation = dict[str, Any]
Scenario = Callable[[Any, str], Awaitable[Observation]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def error_of(exc: BaseException) -> Observation:
    return {
        "raised": type(exc).__name__,
        "message": str(exc),
        "is_a": sorted({cls.__name__ for cls in type(exc).__mro__} - {"object", "BaseException"}),
    }


async def outcome(call: Callable[[], Any]) -> Observation:
    """What a call returns (its type name) or raises (type and message)."""
    try:
        result = call()
        if asyncio.iscoroutine(result):
            result = await result
    except Exception as exc:
        return error_of(exc)
    return {"returned": type(result).__name__}


@dataclasses.dataclass
class Ping:
    n: int


async def wait_state(client: Any, job_id: int, states: set[str], timeout: float = 10.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = str((await client.get_job(job_id)).state)
        if state in states or asyncio.get_running_loop().time() > deadline:
            return state
        await asyncio.sleep(0.05)


@scenario
async def start_errors(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    seen: Observation = {"no_handler": await outcome(lambda: client.start([("q", 1)]))}

    @client.task(Ping, queue="q")
    async def ping(job: Any) -> None:
        return None

    cases: dict[str, Callable[[], Any]] = {
        "tuple_with_global_max": lambda: client.start([("q", 1)], global_max_workers=4),
        "zero_weight": lambda: client.start(
            [{"name": "q", "min_workers": 0, "weight": 0}], global_max_workers=4
        ),
        "weighted_without_queues": lambda: client.start(None, global_max_workers=4),
        "zero_max_workers": lambda: client.start([("q", 0)]),
        "negative_poll": lambda: client.start([("q", 1)], poll_interval_ms=-1),
        "claim_slot_zero": lambda: client.start([("q", 1)], queue_storage_claim_slot_count=0),
        "claim_rotate_zero": lambda: client.start(
            [("q", 1)], queue_storage_claim_rotate_interval_ms=0
        ),
        "queue_slot_one": lambda: client.start([("q", 1)], queue_storage_queue_slot_count=1),
        "bad_role": lambda: client.start([("q", 1)], storage_transition_role="bogus"),
        "unknown_queue_key": lambda: client.start([{"name": "q", "bogus": 1}]),
        "duplicate_queue": lambda: client.start([("q", 1), ("q", 2)]),
    }
    for name, call in cases.items():
        seen[name] = await outcome(call)
        await client.shutdown()
    await client.close()
    return seen


@scenario
async def task_errors(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    seen: Observation = {
        "non_class_args": await outcome(lambda: client.task("not a class")),
        "dict_without_kind": await outcome(lambda: client.task(dict)),
    }
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.worker(Ping, queue="q")
    seen["worker_warning"] = [(w.category.__name__, str(w.message)) for w in caught]
    await client.close()
    return seen


@scenario
async def partitioned_queue(awa: Any, url: str) -> Observation:
    pq = awa.PartitionedQueue
    seen: Observation = {}
    for name, call in {
        "zero": lambda: pq("orders", 0),
        "negative": lambda: pq("orders", -1),
        "too_many": lambda: pq("orders", 100000),
        "empty_name": lambda: pq("", 2),
        "non_int": lambda: pq("orders", "2"),
    }.items():
        seen[name] = await outcome(call)
    queue = pq("orders", 4)
    seen["physical"] = list(queue.physical_queues)
    seen["by_key"] = queue.route_by_key("customer-7")
    seen["by_index"] = [queue.route_by_index(i) for i in range(6)]
    seen["by_index_negative"] = await outcome(lambda: queue.route_by_index(-1))
    seen["by_index_bool"] = await outcome(lambda: queue.route_by_index(True))
    return seen


@scenario
async def callbacks(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    tokens: asyncio.Queue[Any] = asyncio.Queue()
    resumed: asyncio.Queue[Any] = asyncio.Queue()

    @client.task(Ping, queue="cb")
    async def wait(job: Any) -> Any:
        token = await job.register_callback(timeout_seconds=60)
        await tokens.put(token.id)
        if job.args.n == 1:
            payload = await job.wait_for_callback(token)
            await resumed.put(payload)
            return None
        return awa.WaitForCallback(token)

    await client.migrate()
    seen: Observation = {}
    await client.start([("cb", 4)])
    # Resume path.
    first = await client.insert(Ping(1), queue="cb")
    cid = await asyncio.wait_for(tokens.get(), 10)
    await wait_state(client, first.id, {"waiting_external"})  # the handler waits on it
    seen["resume"] = str((await client.resume_external(cid, {"ok": 1})).state)
    seen["resumed_payload"] = await asyncio.wait_for(resumed.get(), 10)
    seen["second_resume"] = await outcome(lambda: client.resume_external(cid, {"ok": 2}))
    seen["heartbeat_after_resume"] = await outcome(lambda: client.heartbeat_callback(cid, 30))
    seen["first_final"] = await wait_state(client, first.id, {"completed", "failed"})
    # Park path.
    parked = await client.insert(Ping(2), queue="cb")
    cid2 = await asyncio.wait_for(tokens.get(), 10)
    seen["parked_state"] = await wait_state(client, parked.id, {"waiting_external"})
    for bad in (-1, 0, math.nan, math.inf):
        seen[f"heartbeat_{bad}"] = await outcome(partial(client.heartbeat_callback, cid2, bad))
    seen["admin_retry_waiting"] = await outcome(lambda: client.retry(parked.id))
    seen["after_admin_retry"] = str((await client.get_job(parked.id)).state)
    # retry_external on a freshly parked job.
    third = await client.insert(Ping(3), queue="cb")
    cid3 = await asyncio.wait_for(tokens.get(), 10)
    await wait_state(client, third.id, {"waiting_external"})
    retried = await client.retry_external(cid3)
    seen["retry_external_state"] = str(retried.state)
    seen["retry_external_attempt"] = retried.attempt
    seen["retry_external_again"] = await outcome(lambda: client.retry_external(cid3))
    seen["complete_unknown"] = await outcome(
        lambda: client.complete_external("00000000-0000-0000-0000-000000000000", {})
    )
    seen["complete_malformed"] = await outcome(lambda: client.complete_external("nope", {}))
    await client.shutdown()
    await client.close()
    return seen


@scenario
async def progress(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    seen: Observation = {}
    done = asyncio.Event()

    @client.task(Ping, queue="pr")
    async def work(job: Any) -> None:
        job.set_progress(40, "reading")
        seen["after_set"] = job.progress
        job.update_metadata({"cursor": 7})
        seen["after_metadata"] = job.progress
        seen["over_100"] = await outcome(lambda: job.set_progress(150, "too far"))
        seen["negative"] = await outcome(lambda: job.set_progress(-1))
        seen["after_bad"] = job.progress
        await job.flush_progress()
        done.set()

    await client.migrate()
    job = await client.insert(Ping(1), queue="pr")
    await client.start([("pr", 1)])
    await asyncio.wait_for(done.wait(), 10)
    seen["final"] = await wait_state(client, job.id, {"completed", "failed"})
    seen["stored_progress"] = (await client.get_job(job.id)).progress
    await client.shutdown()
    await client.close()
    return seen


@scenario
async def shutdown_cancels_handlers(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    started = asyncio.Event()
    observed: Observation = {}

    @client.task(Ping, queue="sd")
    async def slow(job: Any) -> None:
        started.set()
        for _ in range(100):
            if job.is_cancelled():
                observed["saw_cancel"] = True
                return
            await asyncio.sleep(0.05)
        observed["saw_cancel"] = False

    await client.migrate()
    await client.insert(Ping(1), queue="sd")
    await client.start([("sd", 1)])
    await asyncio.wait_for(started.wait(), 10)
    await client.shutdown(timeout_ms=3000)
    await client.close()
    return observed


@scenario
async def admin_edges(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    await client.migrate()
    seen: Observation = {
        "get_missing": await outcome(lambda: client.get_job(999999)),
        "retry_missing": await outcome(lambda: client.retry(999999)),
        "cancel_missing": await outcome(lambda: client.cancel(999999)),
        "bad_priority": await outcome(lambda: client.insert(Ping(1), priority=5)),
        "bad_attempts": await outcome(lambda: client.insert(Ping(1), max_attempts=0)),
        "dict_no_kind": await outcome(lambda: client.insert({"a": 1})),
        "too_many_tags": await outcome(
            lambda: client.insert(Ping(1), tags=[str(i) for i in range(21)])
        ),
        "drain_unknown": await outcome(lambda: client.drain_queue("nowhere")),
        "storage_state": {
            k: v
            for k, v in json.loads(await client.storage_status()).items()
            if not k.endswith("_at")
        },
    }
    job = await client.insert(Ping(1), queue="adm")
    cancelled = await client.cancel(job.id)
    seen["cancelled_state"] = str(cancelled.state) if cancelled is not None else None
    seen["cancel_again"] = await outcome(lambda: client.cancel(job.id))
    result = await client.retry_failed(kind="ping")
    seen["retry_failed_fields"] = sorted(
        name
        for name in dir(result)
        if not name.startswith("_") and not callable(getattr(result, name))
    )
    await client.close()
    return seen


@scenario
async def partitioned_routing(awa: Any, url: str) -> Observation:
    queue = awa.PartitionedQueue("orders", 16)
    seen: Observation = {
        "by_key": [queue.route_by_key(f"customer-{i}")["queue"] for i in range(64)],
        "by_bytes_key": [queue.route_by_key(bytes([i, 255 - i]))["queue"] for i in range(64)],
        "object_key": await outcome(lambda: queue.queue_for_key(object())),
        "int_key": await outcome(lambda: queue.route_by_key(7)),
    }
    for name, options in {
        "no_sizing": {},
        "zero_weight": {"max_workers_per_partition": 2, "weight": 0},
        "zero_weight_weighted": {"min_workers_per_partition": 1, "weight": 0},
        "zero_claimers": {"max_workers_per_partition": 2, "claimers": 0},
        "zero_claim_batch": {"max_workers_per_partition": 2, "claim_batch_size": 0},
    }.items():
        seen[f"configs_{name}"] = await outcome(partial(queue.queue_configs, **options))
    seen["configs_weighted"] = awa.PartitionedQueue("q", 2).queue_configs(
        min_workers_per_partition=0
    )
    return seen


@scenario
async def descriptors_after_start(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)

    @client.task(Ping, queue="desc")
    async def ping(job: Any) -> None:
        return None

    await client.start([("desc", 1)])
    seen: Observation = {
        "queue_descriptor": await outcome(lambda: client.queue_descriptor("desc", owner="x")),
        "job_kind_descriptor": await outcome(lambda: client.job_kind_descriptor("ping", owner="x")),
    }
    await client.shutdown()
    seen["after_shutdown"] = await outcome(lambda: client.queue_descriptor("desc", owner="x"))
    seen["stripe_zero"] = await outcome(
        lambda: client.start([("desc", 1)], queue_storage_queue_stripe_count=0)
    )
    await client.shutdown()
    raw = client._raw
    seen["raw_methods"] = [
        callable(getattr(raw, name, None)) for name in ("get_job", "get_job_sync", "insert_sync")
    ]
    await client.close()
    return seen


@scenario
async def never_migrated(awa: Any, url: str) -> Observation:
    """A client's own SQL and its health check on a database without the schema."""
    client = awa.AsyncClient(url)
    async with await client.transaction() as tx:
        await tx.execute("DROP SCHEMA awa CASCADE")
    await client.close()
    client = awa.AsyncClient(url)
    seen: Observation = {}
    try:
        async with await client.transaction() as tx:
            await tx.execute("CREATE TABLE notes (id int)")
            await tx.execute("INSERT INTO notes VALUES ($1)", 3)
            seen["tx_rows"] = await tx.fetch_all("SELECT id FROM notes")
    except Exception as exc:
        seen["tx"] = error_of(exc)
    try:
        health = await client.health_check()
        seen["health"] = [health.healthy, health.postgres_connected, health.leader]
    except Exception as exc:
        seen["health"] = error_of(exc)
    # (An insert here raises DatabaseError "schema "awa" does not exist" under awa-pg and
    # SchemaNotMigrated naming `awa migrate` here; not compared.)
    await client.migrate()
    seen["insert_after_migrate"] = await outcome(lambda: client.insert(Ping(1)))
    await client.close()
    return seen


@scenario
async def orphaned_queue_storage_schema(awa: Any, url: str) -> Observation:
    """``DROP SCHEMA awa CASCADE`` while another queue-storage schema survives."""
    client = awa.AsyncClient(url)
    await client.install_queue_storage(schema="survivor")
    async with await client.transaction() as tx:
        await tx.execute("DROP SCHEMA awa CASCADE")
    await client.close()
    client = awa.AsyncClient(url)
    migrated = [await outcome(client.migrate) for _ in range(3)]
    seen: Observation = {
        # awa-pg's migrate() returns a tuple, this package's None: compare success only.
        "migrate": [m if "raised" in m else "ok" for m in migrated],
        "insert": await outcome(lambda: client.insert(Ping(1))),
    }
    await client.close()
    return seen


@scenario
async def retry_of_deferred_jobs(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    failures = asyncio.Event()

    @client.task(Ping, queue="later")
    async def flaky(job: Any) -> None:
        failures.set()
        raise RuntimeError("once more")

    later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = await client.insert(Ping(1), queue="later", run_at=later)
    await client.start([("later", 1)])
    retrying = await client.insert(Ping(2), queue="later", max_attempts=5)
    await asyncio.wait_for(failures.wait(), 10)
    seen: Observation = {"retrying": await wait_state(client, retrying.id, {"retryable"})}
    await client.shutdown()
    seen["retry_scheduled"] = await outcome(lambda: client.retry(scheduled.id))
    seen["retry_retryable"] = await outcome(lambda: client.retry(retrying.id))
    seen["after"] = [
        str((await client.get_job(scheduled.id)).state),
        str((await client.get_job(retrying.id)).state),
    ]
    await client.close()
    return seen


@scenario
async def queue_retention_and_retry_completed(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)
    done = asyncio.Event()

    @client.task(Ping, queue="ret")
    async def ping(job: Any) -> None:
        done.set()

    seen: Observation = {
        "per_queue_failed_hours": await outcome(
            lambda: client.start(
                [{"name": "ret", "max_workers": 1, "retention": {"failed_hours": 1}}]
            )
        )
    }
    await client.shutdown()
    job = await client.insert(Ping(1), queue="ret")
    await client.start([("ret", 1)])
    await asyncio.wait_for(done.wait(), 10)
    seen["final"] = await wait_state(client, job.id, {"completed"})
    seen["retry_completed"] = await outcome(lambda: client.retry(job.id))
    await client.shutdown()
    seen["retry_failed_by_queue_pruned"] = (
        await client.retry_failed(queue="ret")
    ).pruned_failed_count
    seen["retry_failed_by_kind_pruned"] = (
        await client.retry_failed(kind="ping")
    ).pruned_failed_count
    await client.close()
    return seen


@scenario
async def dead_lettered_job(awa: Any, url: str) -> Observation:
    client = awa.AsyncClient(url)

    @client.task(Ping, queue="dead")
    async def boom(job: Any) -> None:
        raise ValueError("boom")

    await client.start([("dead", 1)])
    job = await client.insert(Ping(1), queue="dead", max_attempts=1)
    seen: Observation = {"final": await wait_state(client, job.id, {"failed"})}
    await client.shutdown()
    moved = await client.move_failed_to_dlq(job.id, "manual")
    seen["moved"] = moved is not None
    found = await client.get_job(job.id)
    seen["get_job"] = [str(found.state), found.attempt, found.queue]
    seen["retry_dead_lettered"] = await outcome(lambda: client.retry(job.id))
    newer = await client.insert(Ping(2), queue="dead")
    seen["list_jobs"] = [
        [j.id == job.id, j.id == newer.id, str(j.state)] for j in await client.list_jobs()
    ]
    seen["list_failed"] = [
        [j.id == job.id, str(j.state)] for j in await client.list_jobs(state="failed")
    ]
    await client.close()
    return seen


@scenario
async def queue_and_kind_lists(awa: Any, url: str) -> Observation:
    """queue_stats() lists a served queue with no jobs and one whose jobs are all
    dead-lettered (counted as failed)."""
    client = awa.AsyncClient(url)
    await client.install_queue_storage()  # awa-pg keeps its DLQ on queue storage only

    @client.task(Ping, queue="served")
    async def ping(job: Any) -> None:
        return None

    @client.task(Ping, kind="boom", queue="dead")
    async def boom(job: Any) -> None:
        raise ValueError("boom")

    await client.start([("served", 1), ("dead", 1)])
    job = await client.insert(Ping(1), kind="boom", queue="dead", max_attempts=1)
    seen: Observation = {"final": await wait_state(client, job.id, {"failed"})}
    seen["moved"] = await client.move_failed_to_dlq(job.id, "manual") is not None
    seen["queue_stats"] = sorted(
        [s.queue, s.failed, s.total_queued, s.available] for s in await client.queue_stats()
    )
    await client.shutdown()
    await client.close()
    return seen


@scenario
async def testing_clean(awa: Any, url: str) -> Observation:
    import awa.testing

    client = awa.AsyncClient(url)
    await client.insert(Ping(1), queue="kept")
    helper = awa.testing.AwaTestClient(client)
    seen: Observation = {"clean": await outcome(helper.clean)}
    seen["jobs_after"] = len(await client.list_jobs())
    await client.close()
    return seen
