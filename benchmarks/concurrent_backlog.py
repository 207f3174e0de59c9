"""A backlog written by concurrent producers against the same backlog from one producer.

For each ``--jobs`` size, twice on a fresh database: ``--producers`` producer processes
(or one) write the backlog with no worker running, mixing ``insert()``,
``insert_many_copy()`` and ``enqueue_many_copy()`` (per round of 500 jobs: 20 inserts, a
copy insert of 80 and a COPY of 400); then ``awa worker -p 2`` and a second ``awa worker``
(three worker processes) drain it. The queue is paused while the workers start, and the
clock runs from its resume until ``queue_stats()`` shows nothing pending. Printed per
run: enqueue rate, drain rate, the lanes whose unclaimed window is disordered (the
claims must sort it) after the backlog was written, and the ratio of the concurrent drain
to the one-producer drain.

    .venv/bin/python -m benchmarks.concurrent_backlog --jobs 30000
    .venv/bin/python -m benchmarks.concurrent_backlog --jobs 30000,200000

``--peers awa-py,awa-pg,pgqueuer --harness ../shared/bench`` runs the same shape through
the shared harness's adapters instead, each system in its own venv (``--peer-venvs``, as
the harness's ``setup_venvs.sh`` makes them; awa-py runs from this venv): for each size
and system, one producer and then ``--producers`` concurrent producer processes write
the backlog with no worker running (rounds of 20 ``enqueue_one`` calls and one
``enqueue_bulk`` of 480), then three worker processes of ``--slots`` slots each
(``adapter.run_worker``) drain it. The clock runs from the first ``adapter.pending()``
poll below the backlog (the first durable completion seen) to the first at 0; the polls
run every 20 ms in a process of their own. See :mod:`benchmarks._peer_backlog_role`.

    .venv/bin/python -m benchmarks.concurrent_backlog --jobs 30000 \
        --peers awa-py,awa-pg,pgqueuer --harness ../shared/bench
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

import awa
from benchmarks._common import drop_database, fresh_database, parser, report

QUEUE = "backlog"
#: One producer round: single inserts, one insert_many_copy, one enqueue_many_copy.
ROUND_INSERTS = 20
ROUND_COPY_INSERT = 80
ROUND_COPY = 400
ROUND = ROUND_INSERTS + ROUND_COPY_INSERT + ROUND_COPY
#: The worker module ``awa worker -m`` loads (handlers of this benchmark's jobs).
WORKER_MODULE = "benchmarks._backlog_worker"


@dataclass
class BacklogNoop:
    seq: int


async def _setup(url: str) -> None:
    """Migrate and activate the default storage engine (a first worker start does)."""
    setup = awa.AsyncClient(url, max_connections=5)
    await setup.migrate()

    @setup.task(BacklogNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    await setup.start([(QUEUE, 1)], poll_interval_ms=50)
    await setup.shutdown(timeout_ms=5000)
    await setup.close()


async def _produce(url: str, first: int, count: int) -> None:
    client = awa.AsyncClient(url, max_connections=5)
    seq = first
    end = first + count
    try:
        while seq < end:
            for _ in range(min(ROUND_INSERTS, end - seq)):
                await client.insert(BacklogNoop(seq=seq), queue=QUEUE)
                seq += 1
            n = min(ROUND_COPY_INSERT, end - seq)
            if n > 0:
                await client.insert_many_copy(
                    [BacklogNoop(seq=s) for s in range(seq, seq + n)], queue=QUEUE
                )
                seq += n
            n = min(ROUND_COPY, end - seq)
            if n > 0:
                await client.enqueue_many_copy(
                    [BacklogNoop(seq=s) for s in range(seq, seq + n)], queue=QUEUE
                )
                seq += n
    finally:
        await client.close()


def _producer_process(url: str, first: int, count: int) -> None:
    asyncio.run(_produce(url, first, count))


def write_backlog(url: str, jobs: int, producers: int) -> float:
    """``producers`` processes write ``jobs`` jobs between them; returns jobs/s."""
    share = [jobs // producers + (1 if i < jobs % producers else 0) for i in range(producers)]
    ctx = multiprocessing.get_context("spawn")
    procs = []
    first = 0
    started = time.perf_counter()
    for count in share:
        proc = ctx.Process(target=_producer_process, args=(url, first, count))
        proc.start()
        procs.append(proc)
        first += count
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a producer exited with {proc.exitcode}")
    return report(f"enqueue ({producers} producer{'s' if producers > 1 else ''})", jobs, started)


def disordered_lanes(url: str) -> tuple[int, int]:
    """(disordered lanes, lanes) of the queue: a disordered lane's claims sort its window."""
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'lanes' AND c.relkind = 'r'"
        ).fetchone()
        assert found is not None, "no queue-storage schema"
        schema = sql.Identifier(found[0])
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE l.disorder_seq >= h.claim_seq), count(*) "
                "FROM {s}.lanes l JOIN {s}.claim_heads h USING (queue, priority, shard) "
                "WHERE l.queue LIKE %s"
            ).format(s=schema),
            (QUEUE + "%",),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


async def _pending(client: awa.AsyncClient) -> int:
    for s in await client.queue_stats():
        if s.queue == QUEUE:
            return int(s.available + s.running + s.retryable + s.scheduled + s.waiting_external)
    return 0


def _start_workers(url: str, slots: int, log: Path) -> list[tuple[subprocess.Popen[bytes], int]]:
    """``awa worker -p 2`` and a second ``awa worker``: three worker processes."""
    awa_bin = str(Path(sys.executable).with_name("awa"))
    env = dict(os.environ, DATABASE_URL=url)
    started = []
    for processes in (2, 1):
        port = _free_port() if processes == 1 else 0
        cmd = [awa_bin, "worker", "-m", WORKER_MODULE, "-q", f"{QUEUE}:{slots}"]
        cmd += ["-p", str(processes), "--log-level", "warning"]
        if port:
            cmd += ["--health-addr", f"127.0.0.1:{port}"]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        started.append((proc, port))
    return started


async def drain(url: str, jobs: int, slots: int, log: Path) -> float:
    """Pause the queue, start the three worker processes, resume, and time the drain."""
    client = awa.AsyncClient(url, max_connections=2)
    await client.pause_queue(QUEUE)
    workers = _start_workers(url, slots, log)
    try:
        # Readiness of the single-process worker; the supervised pair starts alongside.
        deadline = time.monotonic() + 60
        while not any(port and _ready(port) for _, port in workers):
            if time.monotonic() > deadline:
                raise SystemExit(f"workers did not become ready; see {log}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # the supervised pair's two children start their runtimes
        started = time.perf_counter()
        await client.resume_queue(QUEUE)
        while await _pending(client) > 0:
            await asyncio.sleep(0.05)
        rate = report("drain (3 worker processes)", jobs, started)
    finally:
        for proc, _ in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in workers:
            _stop_group(proc)
        await client.close()
    return rate


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Wait for ``proc`` and every process of its group (a supervisor's children) to exit
    after SIGTERM, then SIGKILL what is left: the scratch database is dropped next."""
    deadline = time.monotonic() + 30
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def one_run(admin_url: str, name: str, jobs: int, producers: int, slots: int, log: Path) -> float:
    url = fresh_database(admin_url, name)
    try:
        asyncio.run(_setup(url))
        write_backlog(url, jobs, producers)
        bad, lanes = disordered_lanes(url)
        print(f"lanes with a disordered window: {bad} of {lanes}", flush=True)
        return asyncio.run(drain(url, jobs, slots, log))
    finally:
        drop_database(admin_url, name)


#: The harness's adapter module and venv directory of each system it knows.
PEER_SYSTEMS = {
    "awa-py": ("awa_py", None),
    "awa-pg": ("awa_pg", "awa_pg"),
    "pgqueuer": ("pgqueuer_adapter", "pgqueuer"),
}
PEER_WORKERS = 3
ROLE_SCRIPT = Path(__file__).with_name("_peer_backlog_role.py")


def _role(python: str, harness: Path, module: str, url: str, role: str, *extra: str) -> list[str]:
    script = [python, str(ROLE_SCRIPT), role]
    return [*script, "--harness", str(harness), "--adapter", module, "--dsn", url, *extra]


def peer_run(
    admin_url: str,
    name: str,
    system: str,
    harness: Path,
    venvs: Path,
    jobs: int,
    producers: int,
    slots: int,
    log: Path,
) -> tuple[float, float]:
    """One backlog of ``system`` through the harness's adapter: (enqueue jobs/s, drain
    jobs/s)."""  # fmt: skip
    module, venv = PEER_SYSTEMS[system]
    python = sys.executable if venv is None else str(venvs / venv / "bin" / "python")
    url = fresh_database(admin_url, name)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with log.open("ab") as out:
            subprocess.run(
                _role(python, harness, module, url, "setup"), stdout=out, stderr=out, check=True
            )
            share = [
                jobs // producers + (1 if i < jobs % producers else 0) for i in range(producers)
            ]
            started = time.perf_counter()
            procs, first = [], 0
            for count in share:
                extra = ("--first", str(first), "--count", str(count))
                procs.append(
                    subprocess.Popen(
                        _role(python, harness, module, url, "produce", *extra),
                        stdout=out, stderr=out,
                    )
                )  # fmt: skip
                first += count
            for proc in procs:
                if proc.wait() != 0:
                    raise SystemExit(
                        f"a {system} producer exited with {proc.returncode}; see {log}"
                    )
            enqueue = report(f"{system} enqueue ({producers} producer(s))", jobs, started)
            watch = subprocess.Popen(
                _role(python, harness, module, url, "watch", "--count", str(jobs)),
                stdout=subprocess.PIPE, stderr=out,
            )  # fmt: skip
            for _ in range(PEER_WORKERS):
                workers.append(
                    subprocess.Popen(
                        _role(python, harness, module, url, "work", "--slots", str(slots)),
                        stdout=subprocess.DEVNULL, stderr=out,
                    )
                )  # fmt: skip
            watched, _ = watch.communicate()
        seen = json.loads(watched.decode().strip().splitlines()[-1])
        if seen["left"] != 0 or seen["began"] is None:
            raise SystemExit(f"{system}: the drain did not finish ({seen}); see {log}")
        seconds = seen["ended"] - seen["began"]
        drain_rate = jobs / seconds
        print(
            f"{system} drain ({PEER_WORKERS} worker processes, {producers} producer(s)): "
            f"{jobs} in {seconds:.3f}s = {drain_rate:,.0f}/s ({seen['polls']} polls)",
            flush=True,
        )
        return enqueue, drain_rate
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        drop_database(admin_url, name)


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def peers_main(a: argparse.Namespace, name: str, log: Path) -> None:
    systems = a.peers.split(",")
    for system in systems:
        if system not in PEER_SYSTEMS:
            raise SystemExit(
                f"--peers: unknown system {system!r} (known: {', '.join(PEER_SYSTEMS)})"
            )
    for jobs in (int(j) for j in a.jobs.split(",")):
        for system in systems:
            print(
                f"== {jobs} jobs, {system} (load {_load()}, {time.strftime('%H:%M:%S')})",
                flush=True,
            )
            _, one = peer_run(
                a.admin_url, name, system, a.harness, a.peer_venvs, jobs, 1, a.slots, log
            )
            _, many = peer_run(
                a.admin_url, name, system, a.harness, a.peer_venvs, jobs, a.producers, a.slots, log
            )
            print(
                f"{system}, {jobs} jobs: {a.producers} producers drain at {many:,.0f}/s, one "
                f"producer at {one:,.0f}/s: {many / one:.2f}x (load {_load()})",
                flush=True,
            )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--jobs", default="30000", help="comma-separated backlog sizes")
    p.add_argument("--producers", type=int, default=8)
    p.add_argument("--slots", type=int, default=32, help="handler slots per worker process")
    p.add_argument("--log", default="/tmp/awa-concurrent-backlog-workers.log")
    p.add_argument("--peers", default=None, help="systems to run through the harness's adapters")
    p.add_argument("--harness", type=Path, default=Path("../shared/bench"))
    p.add_argument("--peer-venvs", type=Path, default=Path("/tmp/bench-venvs"))
    a = p.parse_args()
    name = a.db or "awa_bench_concurrent_backlog"
    log = Path(a.log)
    if a.peers:
        peers_main(a, name, log)
        return
    for jobs in (int(j) for j in a.jobs.split(",")):
        print(f"== {jobs} jobs", flush=True)
        one = one_run(a.admin_url, name, jobs, 1, a.slots, log)
        many = one_run(a.admin_url, name, jobs, a.producers, a.slots, log)
        print(
            f"{jobs} jobs: {a.producers} producers drain at {many:,.0f}/s, one producer at "
            f"{one:,.0f}/s: {many / one:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
