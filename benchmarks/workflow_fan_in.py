"""Dependencies' cost (issue 44, ADR 0032), in one run on one database:

1. ``--steps`` plain jobs (no dependencies) inserted in one transaction, then worked:
   the time from the worker's start to the last completion;
2. a fan-out/fan-in workflow of the same number of jobs: ``--steps`` - ``--groups`` - 1
   leaves, ``--groups`` group joins (each waiting on its share of the leaves, at most 100
   parents a job) and one final join waiting on the group joins, inserted with
   ``awa.Workflow`` in one transaction, then worked: the time to the final join's
   completion. Both inserts go through ``Transaction.insert``, one job at a time, so the
   insert times compare too;
3. a chain of ``--chain`` steps (each waiting on the one before): the hand-off latency,
   (step n+1's handler started) - (step n's handler returned), p50 / p99.

    .venv/bin/python -m benchmarks.workflow_fan_in --steps 10000 --chain 1000
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import awa
from benchmarks._common import drop_database, fresh_database, parser, percentile


@dataclasses.dataclass
class Step:
    n: int


async def run(url: str, steps: int, groups: int, chain: int, workers: int) -> None:
    client = awa.AsyncClient(url, max_connections=20)
    done: dict[str, int] = {}
    wanted: dict[str, int] = {}
    finished: dict[str, asyncio.Event] = {}
    started_at: dict[int, float] = {}
    returned_at: dict[int, float] = {}

    def task_for(queue: str) -> None:
        done[queue] = 0
        finished[queue] = asyncio.Event()

        @client.task(Step, kind=f"step_{queue}", queue=queue)
        async def step(job: awa.Job[Step]) -> None:
            if queue == "chain":
                started_at[job.args.n] = time.perf_counter()
            done[queue] += 1
            if queue == "chain":
                returned_at[job.args.n] = time.perf_counter()
            if done[queue] == wanted[queue]:
                finished[queue].set()

    for queue in ("plain", "flow", "chain"):
        task_for(queue)
    await client.migrate()

    async def work(queue: str) -> float:
        began = time.perf_counter()
        # Every registered queue runs; only this phase's holds jobs.
        await client.start([(q, workers) for q in done], promote_interval_ms=50)
        await finished[queue].wait()
        took = time.perf_counter() - began
        await client.shutdown()
        return took

    # 1. plain jobs
    wanted["plain"] = steps
    began = time.perf_counter()
    async with await client.transaction() as tx:
        for n in range(steps):
            await tx.insert(Step(n), kind="step_plain", queue="plain")
    plain_insert = time.perf_counter() - began
    plain_run = await work("plain")

    # 2. fan-out / fan-in
    wanted["flow"] = steps
    leaves = steps - groups - 1
    wf = awa.Workflow()
    for g in range(groups):
        share = [f"leaf-{n}" for n in range(g, leaves, groups)]
        wf.add(Step(-g - 1), kind="step_flow", queue="flow", name=f"group-{g}", depends_on=share)
    for n in range(leaves):
        wf.add(Step(n), kind="step_flow", queue="flow", name=f"leaf-{n}")
    wf.add(
        Step(-1_000_000),
        kind="step_flow",
        queue="flow",
        name="join",
        depends_on=[f"group-{g}" for g in range(groups)],
    )
    began = time.perf_counter()
    jobs = await wf.insert(client)
    flow_insert = time.perf_counter() - began
    flow_run = await work("flow")
    join = await client.get_job(jobs["join"].id)
    assert join.state == awa.JobState.Completed, join.state

    # 3. chain
    wanted["chain"] = chain
    wf = awa.Workflow()
    for n in range(chain):
        parents = [f"c{n - 1}"] if n else []
        wf.add(Step(n), kind="step_chain", queue="chain", name=f"c{n}", depends_on=parents)
    await wf.insert(client)
    chain_run = await work("chain")
    await client.close()

    handoffs = [(started_at[n + 1] - returned_at[n]) * 1000 for n in range(chain - 1)]
    print(f"plain: {steps} jobs, insert {plain_insert:.2f} s, run {plain_run:.2f} s")
    print(
        f"fan-out/fan-in: {leaves} leaves -> {groups} joins -> 1 join, "
        f"insert {flow_insert:.2f} s, run to the join {flow_run:.2f} s"
    )
    print(
        f"overhead: run {100 * (flow_run / plain_run - 1):+.1f} %, "
        f"insert {100 * (flow_insert / plain_insert - 1):+.1f} %"
    )
    print(
        f"chain of {chain}: {chain_run:.2f} s, hand-off ms p50 "
        f"{percentile(handoffs, 0.50):.2f}  p99 {percentile(handoffs, 0.99):.2f}  "
        f"max {max(handoffs):.2f}"
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--chain", type=int, default=1_000)
    p.add_argument("--workers", type=int, default=20)
    args = p.parse_args()
    name = args.db or "awa_bench_workflow"
    url = fresh_database(args.admin_url, name)
    try:
        asyncio.run(run(url, args.steps, args.groups, args.chain, args.workers))
    finally:
        drop_database(args.admin_url, name)


if __name__ == "__main__":
    main()
