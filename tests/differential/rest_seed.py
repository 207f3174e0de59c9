"""One seeded database for comparing the admin REST API's JSON with awa-cli 0.6.9's.

:func:`seed` runs public calls only, under whichever ``awa`` it is handed (awa-pg 0.6.9
or this package), and leaves a started client behind so the runtime endpoints have a
live runtime to show. It makes:

* queue ``mail`` (kind ``send_email``): completed, running (held by the handler until
  :meth:`Seeded.release`), waiting_external, retryable and cancelled jobs;
* queue ``reports`` (kind ``report``): a failed job and a scheduled one;
* queue ``graveyard`` (kind ``doomed``): served, with every job dead-lettered;
* kind ``idle_kind``: declared with a handler, never enqueued;
* kind ``orphan``: jobs in queue ``unserved``, which no handler serves;
* a yearly cron schedule ``yearly_report``.

``record_rest_shapes.py`` reads awa-cli's answers over this data into
``tests/fixtures/awa_cli_rest_shapes.json``; the web test seeds the same data through this
package and compares. It uses nothing but the standard library and the ``awa`` it is
handed.
"""

# The package under test is handed in untyped, so its decorators are untyped too.
# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

QUEUES = ("mail", "reports", "graveyard")
#: The job of each state whose ``/api/jobs/{id}`` answer is compared.
STATES = (
    "completed",
    "running",
    "waiting_external",
    "retryable",
    "cancelled",
    "failed",
    "scheduled",
    "available",
)


@dataclasses.dataclass
class SendEmail:
    n: int
    mode: str


@dataclasses.dataclass
class Report:
    n: int


@dataclasses.dataclass
class Doomed:
    n: int


@dataclasses.dataclass
class IdleKind:
    n: int


@dataclasses.dataclass
class Seeded:
    client: Any
    ids: dict[str, int]
    dlq_ids: list[int]
    hold: asyncio.Event

    async def release(self) -> None:
        """Let the held job finish and stop the client."""
        self.hold.set()
        await self.client.shutdown()
        await self.client.close()


async def wait_state(client: Any, job_id: int, states: set[str], timeout: float = 20.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = str((await client.get_job(job_id)).state)
        if state in states:
            return state
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"job {job_id} is {state}, not {sorted(states)}")
        await asyncio.sleep(0.05)


async def seed(awa: Any, url: str) -> Seeded:
    client = awa.AsyncClient(url)
    # awa-pg keeps its DLQ on queue storage only; this package's migration installs it.
    await client.install_queue_storage()
    hold = asyncio.Event()
    running = asyncio.Event()

    @client.task(SendEmail, kind="send_email", queue="mail")
    async def send_email(job: Any) -> Any:
        mode = job.args.mode
        if mode == "hold":
            running.set()
            await hold.wait()
            return None
        if mode == "callback":
            token = await job.register_callback(timeout_seconds=3600)
            return awa.WaitForCallback(token)
        if mode == "retry":
            return awa.RetryAfter(3600)
        return None

    @client.task(Report, kind="report", queue="reports")
    async def report(job: Any) -> None:
        raise RuntimeError("report failed")

    @client.task(Doomed, kind="doomed", queue="graveyard")
    async def doomed(job: Any) -> None:
        raise RuntimeError("doomed")

    @client.task(IdleKind, kind="idle_kind", queue="mail")
    async def idle(job: Any) -> None:
        return None

    for queue in QUEUES:
        client.queue_descriptor(
            queue, display_name=queue.title(), owner="ops", tags=["seeded"], extra={"tier": 1}
        )
    client.job_kind_descriptor(
        "send_email", display_name="Send email", description="Outbound mail", tags=["mail"]
    )
    client.job_kind_descriptor("idle_kind", display_name="Idle", description="Never enqueued")
    # A yearly schedule: stored at start, it fires nothing while the data is read.
    client.periodic("yearly_report", "0 0 1 1 *", Report, Report(0), queue="reports")

    ids: dict[str, int] = {}
    ids["completed"] = (await client.insert(SendEmail(1, "ok"), queue="mail", tags=["vip"])).id
    ids["running"] = (await client.insert(SendEmail(2, "hold"), queue="mail")).id
    ids["waiting_external"] = (await client.insert(SendEmail(3, "callback"), queue="mail")).id
    ids["retryable"] = (await client.insert(SendEmail(4, "retry"), queue="mail", max_attempts=5)).id
    ids["failed"] = (await client.insert(Report(1), queue="reports", max_attempts=1)).id
    later = datetime.now(UTC) + timedelta(days=30)
    ids["scheduled"] = (await client.insert(Report(2), queue="reports", run_at=later)).id
    ids["available"] = (await client.insert({"n": 1}, kind="orphan", queue="unserved")).id
    cancelled = await client.insert({"n": 2}, kind="orphan", queue="unserved")
    await client.cancel(cancelled.id)
    ids["cancelled"] = cancelled.id
    doomed_ids = [
        (await client.insert(Doomed(i), queue="graveyard", max_attempts=1)).id for i in range(2)
    ]

    await client.start([("mail", 4), ("reports", 2), ("graveyard", 1)])
    for state, job_id in ids.items():
        await wait_state(client, job_id, {state})
    await asyncio.wait_for(running.wait(), timeout=20)
    for job_id in doomed_ids:
        await wait_state(client, job_id, {"failed"})
        await client.move_failed_to_dlq(job_id, "seeded dead letter")
    return Seeded(client=client, ids=ids, dlq_ids=doomed_ids, hold=hold)


def endpoints(seeded: Seeded) -> dict[str, str]:
    """The compared endpoints by label: label -> path."""
    paths = {f"job_{state}": f"/api/jobs/{job_id}" for state, job_id in seeded.ids.items()}
    paths["job_dead_lettered"] = f"/api/jobs/{seeded.dlq_ids[0]}"
    paths.update(
        {
            "dlq": "/api/dlq",
            "dlq_entry": f"/api/dlq/{seeded.dlq_ids[0]}",
            "dlq_depth": "/api/dlq/depth",
            "queues": "/api/queues",
            "queue_mail": "/api/queues/mail",
            "queue_graveyard": "/api/queues/graveyard",
            "queues_runtime": "/api/queues/runtime",
            "kinds": "/api/kinds",
            "runtime": "/api/runtime",
            # Beyond the seven: the other reads a dashboard polls.
            "jobs": "/api/jobs",
            "jobs_failed": "/api/jobs?state=failed",
            "stats": "/api/stats",
            "stats_queues": "/api/stats/queues",
            "stats_kinds": "/api/stats/kinds",
            "cron": "/api/cron",
            "capabilities": "/api/capabilities",
        }
    )
    return paths


def shape(value: Any) -> Any:
    """Key names and value types, recursively: a dict maps keys to shapes, a list is
    ``{"list": shape}`` of its items merged, a scalar is the set of its type names."""
    if isinstance(value, dict):
        return {"object": {k: shape(v) for k, v in sorted(value.items())}}
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = merge(merged, shape(item))
        return {"list": merged}
    if value is None:
        return ["null"]
    if isinstance(value, bool):
        return ["boolean"]
    if isinstance(value, int):
        return ["integer"]
    if isinstance(value, float):
        return ["number"]
    return ["string"]


def merge(a: Any, b: Any) -> Any:
    """One shape that every value of either shape fits."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, list) and isinstance(b, list):
        return sorted(set(a) | set(b))
    if isinstance(a, list):
        a, b = b, a
    if isinstance(b, list):  # a container merged with scalars: keep both as alternatives
        return {**a, "or": sorted(set(b) | set(a.get("or", [])))}
    if "object" in a and "object" in b:
        keys = set(a["object"]) | set(b["object"])
        return {"object": {k: merge(a["object"].get(k), b["object"].get(k)) for k in sorted(keys)}}
    if "list" in a and "list" in b:
        return {"list": merge(a["list"], b["list"])}
    return {**a, **b}


def _types(node: Any) -> set[str]:
    if isinstance(node, list):
        return set(node)
    found = {"object"} if "object" in node else {"list"} if "list" in node else set()
    return found | set(node.get("or", []))


def _fits(theirs: set[str], ours: set[str]) -> bool:
    """Whether values of types ``ours`` are what a reader of ``theirs`` accepts: an
    original that only ever answered null says nothing; an integer is a number."""
    wanted = theirs - {"null"}
    if not wanted:
        return True
    accepted = wanted | ({"integer"} if "number" in wanted else set()) | (theirs & {"null"})
    return bool(ours) and ours <= accepted


def shape_problems(theirs: Any, ours: Any, path: str = "$") -> list[str]:
    """Where ``ours`` misses a key of ``theirs`` or holds a type a reader of theirs would
    not accept, as ``path: problem`` lines (extra keys in ours are fine)."""
    if theirs is None:  # an empty list in the original: nothing to hold ours to
        return []
    if ours is None:
        return [f"{path}: empty where the original has items"]
    problems: list[str] = []
    if not _fits(_types(theirs), _types(ours)):
        return [f"{path}: {sorted(_types(ours))} where the original has {sorted(_types(theirs))}"]
    if isinstance(theirs, dict) and "object" in theirs and isinstance(ours, dict):
        for key, node in theirs["object"].items():
            if key not in ours.get("object", {}):
                problems.append(f"{path}.{key}: missing")
            else:
                problems += shape_problems(node, ours["object"][key], f"{path}.{key}")
    if isinstance(theirs, dict) and "list" in theirs and isinstance(ours, dict):
        problems += shape_problems(theirs["list"], ours.get("list"), f"{path}[]")
    return problems
