"""A fleet of worker hosts at real network latency, built on this machine.

Each worker "host" is a Linux network namespace joined to the root namespace by a veth
pair, with ``tc netem`` adding half the round trip on each end, so every packet between a
worker and Postgres crosses a link with the chosen round trip (0, 1, 5, 20 ms). Postgres
is a server of the benchmark's own (``initdb`` in a temporary directory, the machine's
Postgres binaries) listening on the root ends of the links; nothing leaves this machine.
Needs root (``ip netns``, ``tc``). The namespaces and the server are removed at the end of
every run, also after an error or Ctrl-C.

Workloads, for every round trip and host count:

* ``drain``: 30,000 no-op jobs are enqueued beforehand (from the root namespace), then
  one worker process per host (64 slots, claim batch 512, as the shared harness's worker)
  starts; the clock runs from the moment all workers have started until ``queue_stats()``
  shows nothing pending (durably completed).
* ``latency``: a producer on host 1 offers R single ``insert()`` calls per second (8 in
  flight) for ``--seconds`` while the workers run; pickup is the producer's commit to the
  handler's start (one host clock), reported with the producer's insert call beside it
  (call to hearing the commit).

    sudo .venv/bin/python -m benchmarks.netns_fleet --rtt 0,1,5,20 --hosts 1,4
    sudo .venv/bin/python -m benchmarks.netns_fleet --rtt 5 --hosts 4 --workloads drain

``--peers-harness DIR`` also runs the shared side-by-side harness (``bench.py`` in DIR,
drain and latency, awa-py against awa-pg and pgqueuer) inside host 1 at each round trip,
so the peers cross the same link; its reports land in ``--out``, and each system's
latency rows are printed with its producer's insert call beside pickup and e2e. Pickup @200/s
at 1 and 20 ms, awa-py and pgqueuer interleaved, 5 runs::

    sudo .venv/bin/python -m benchmarks.netns_fleet --rtt 1,20 --hosts 1 --workloads none \
        --harness-workloads latency --rates 200 --seconds 20 --peers-harness ../shared/bench \
        --peer-systems awa-py,pgqueuer --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

import awa
from benchmarks._common import percentile
from benchmarks.drain import QUEUE, BenchNoop, enqueue_backlog
from benchmarks.pickup_latency import offer_inserts

NS_PREFIX = "awafleet"
CRON_NAME = "fleet_tick"
HOLD_QUEUE = "fleet_hold"
#: No worker serves it: fired jobs stay available, so every fire is still there to count.
CRON_QUEUE = "fleet_cron"
SUBNET = "10.231"
READY_TIMEOUT = 60.0
DRAIN_TIMEOUT = 600.0


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def _root_ip(host: int) -> str:
    return f"{SUBNET}.{host}.1"


def _ns(host: int) -> str:
    return f"{NS_PREFIX}{host}"


# ------------------------------------------------------------------ the links


def remove_links() -> None:
    """Delete every namespace this benchmark may have left (its veth pairs go with it)."""
    listed = _sh("ip", "netns", "list", check=False).stdout.split()
    for name in listed:
        if name.startswith(NS_PREFIX):
            # A process left inside would keep the namespace (and its link) alive.
            for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _sh("ip", "netns", "del", name, check=False)
    for line in _sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith("afv") and name.endswith("r"):
            _sh("ip", "link", "del", name, check=False)


def make_links(hosts: int) -> None:
    remove_links()
    for h in range(1, hosts + 1):
        ns, root_end, ns_end = _ns(h), f"afv{h}r", f"afv{h}n"
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", root_end, "type", "veth", "peer", "name", ns_end)
        _sh("ip", "link", "set", ns_end, "netns", ns)
        _sh("ip", "addr", "add", f"{_root_ip(h)}/24", "dev", root_end)
        _sh("ip", "link", "set", root_end, "up")
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.{h}.2/24", "dev", ns_end)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


class _Relay:
    """Forwards bytes both ways, each chunk ``delay`` seconds after it arrived, in order.

    The delay is applied per direction, so a round trip costs twice ``delay`` plus the
    relay's own hop; chunks are pipelined, so the link's throughput is not capped by it."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(65536)
                await queue.put((loop.time() + self.delay, data))
                if not data:
                    break
        except ConnectionError:
            await queue.put((0.0, b""))
        with contextlib.suppress(ConnectionError):
            await sender

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )


async def _relay(listen: list[str], target: str, delay_ms: float) -> None:
    host, port = target.rsplit(":", 1)
    relay = _Relay((host, int(port)), delay_ms / 1000)
    servers = []
    for address in listen:
        lhost, lport = address.rsplit(":", 1)
        servers.append(await asyncio.start_server(relay.handle, lhost, int(lport)))
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for srv in servers:
        srv.close()


@contextlib.contextmanager
def links_with_rtt(hosts: int, rtt_ms: float) -> Iterator[None]:
    """The relay on the root end of every link, adding half ``rtt_ms`` each way.

    This kernel has no ``sch_netem`` (``CONFIG_NET_SCH_NETEM`` is not set), so ``tc netem``
    cannot delay the veth links; the delay is added in user space, on the root end."""
    listen = [f"{_root_ip(h)}:{RELAY_PORT}" for h in range(1, hosts + 1)]
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "benchmarks.netns_fleet", "relay",
            "--listen", ",".join(listen), "--to", f"{_SERVER[0]}:{_SERVER[1]}",
            "--delay-ms", str(rtt_ms / 2),
        ],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError("the delay relay did not start")
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def measured_rtt_ms(host: int) -> float:
    """The round trip of a query from the host through its link (median of 20 ``SELECT 1``)."""
    code = (
        "import statistics, sys, time, psycopg\n"
        "r = []\n"
        "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "    for _ in range(20):\n"
        "        t = time.perf_counter()\n"
        "        c.execute('SELECT 1').fetchone()\n"
        "        r.append(time.perf_counter() - t)\n"
        "print(statistics.median(r) * 1000)\n"
    )
    out = _sh(
        "ip", "netns", "exec", _ns(host), sys.executable, "-c", code, _db_url("postgres", host)
    )
    return float(out.stdout.strip())


# ------------------------------------------------------------------ the server

#: The Postgres server the relays forward to (``--server``).
_SERVER: list[Any] = ["127.0.0.1", 5432]
RELAY_PORT = 6543


def _db_url(database: str, host: int | None) -> str:
    if host is None:
        return f"postgresql://postgres@{_SERVER[0]}:{_SERVER[1]}/{database}"
    return f"postgresql://postgres@{_root_ip(host)}:{RELAY_PORT}/{database}"


def fresh(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


# ------------------------------------------------------------------ processes on hosts


def _spawn(host: int, *args: str) -> subprocess.Popen[str]:
    """A process of this module inside the host's namespace; its stderr goes to a file
    (a pipe nobody reads would fill and stall it), read back on failure."""
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (kept open while the process runs)
    proc = subprocess.Popen(
        ["ip", "netns", "exec", _ns(host), sys.executable, "-m", "benchmarks.netns_fleet", *args],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    _LOGS[proc.pid] = log
    return proc


_LOGS: dict[int, Any] = {}


def _stderr(proc: subprocess.Popen[str]) -> str:
    log = _LOGS.get(proc.pid)
    if log is None:
        return ""
    log.seek(0)
    text: str = log.read()
    return text[-3000:]


@dataclass
class Hold:
    """A job that runs until its worker dies (the failover's rescue probe)."""

    n: int


async def _worker(
    url: str, slots: int, batch: int, starts_out: str, *, failover: bool = False
) -> None:
    client = awa.AsyncClient(url, max_connections=8)
    starts: list[tuple[int, float]] = []

    @client.task(BenchNoop, queue=QUEUE)
    async def noop(job: awa.Job[BenchNoop]) -> None:
        starts.append((job.args.seq, time.time()))

    queues: list[Any] = [{"name": QUEUE, "max_workers": slots, "claim_batch_size": batch}]
    options: dict[str, Any] = {}
    if failover:
        # Leadership at its defaults; heartbeats tightened so a dead worker's job is
        # rescued within seconds rather than the default 90 s.
        client.periodic(
            CRON_NAME, "* * * * * *", BenchNoop, BenchNoop(seq=-2, t=0.0), queue=CRON_QUEUE,
            missed_fire_policy="catch_up",
        )  # fmt: skip

        @client.task(Hold, queue=HOLD_QUEUE)
        async def hold(job: awa.Job[Hold]) -> None:
            await asyncio.Event().wait()

        queues.append({"name": HOLD_QUEUE, "max_workers": 2})
        options = {"heartbeat_interval_ms": 1000, "heartbeat_staleness_ms": 4000}

    stop, go = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    await client.health_check()  # connect before the clock starts
    print("READY", flush=True)
    await go.wait()
    await client.start(queues, **options)
    await stop.wait()
    await client.shutdown(timeout_ms=5000)
    await client.close()
    Path(starts_out).write_text(json.dumps(starts))


async def _producer(url: str, rate: float, seconds: float, inflight: int, out: str) -> None:
    recs = await offer_inserts(url, rate, seconds, inflight, stop_at_deadline=True)
    Path(out).write_text(json.dumps(recs))


async def _wait_empty(url: str, timeout: float) -> bool:
    """Poll ``queue_stats()`` until nothing of the queue is pending; False on timeout."""
    client = awa.AsyncClient(url, max_connections=2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pending = 0
            for s in await client.queue_stats():
                if s.queue == QUEUE:
                    pending = int(s.available + s.running + s.retryable + s.scheduled)
            if pending == 0:
                return True
            await asyncio.sleep(0.05)
        return False
    finally:
        await client.close()


def _start_workers(
    db: str, hosts: int, tmp: Path, *extra: str
) -> list[tuple[subprocess.Popen[str], Path]]:
    workers = []
    for h in range(1, hosts + 1):
        out = tmp / f"starts-{h}.json"
        proc = _spawn(h, "worker", "--url", _db_url(db, h), "--starts-out", str(out), *extra)
        workers.append((proc, out))
    for proc, _ in workers:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            proc.kill()
            raise RuntimeError(f"a worker did not start: {line!r} {_stderr(proc)}")
    for proc, _ in workers:
        proc.send_signal(signal.SIGUSR1)
    return workers


def _stop_workers(workers: list[tuple[subprocess.Popen[str], Path]]) -> list[tuple[int, float]]:
    for proc, _ in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    starts: list[tuple[int, float]] = []
    for proc, out in workers:
        proc.wait(timeout=READY_TIMEOUT)
        if out.exists():
            starts += [(int(s), float(t)) for s, t in json.loads(out.read_text())]
    return starts


def drain(admin: str, hosts: int, jobs: int, tmp: Path) -> dict[str, Any]:
    db = f"fleet_drain_{hosts}"
    fresh(admin, db)
    asyncio.run(enqueue_backlog(_db_url(db, None), jobs))
    workers, began = _start_workers(db, hosts, tmp), time.monotonic()
    try:
        if not asyncio.run(_wait_empty(_db_url(db, None), DRAIN_TIMEOUT)):
            raise RuntimeError(f"the drain did not finish within {DRAIN_TIMEOUT} s")
        elapsed = time.monotonic() - began
    finally:
        _stop_workers(workers)
    return {"jobs": jobs, "seconds": round(elapsed, 2), "jobs_per_s": round(jobs / elapsed)}


def latency(admin: str, hosts: int, rate: float, seconds: float, tmp: Path) -> dict[str, Any]:
    db = f"fleet_latency_{hosts}"
    fresh(admin, db)
    asyncio.run(enqueue_backlog(_db_url(db, None), 0))
    workers = _start_workers(db, hosts, tmp)
    commits_out = tmp / "commits.json"
    try:
        producer = _spawn(
            1, "produce", "--url", _db_url(db, 1), "--rate", str(rate),
            "--seconds", str(seconds), "--out", str(commits_out),
        )  # fmt: skip
        try:
            producer.wait(timeout=seconds + READY_TIMEOUT)
        except subprocess.TimeoutExpired:
            producer.kill()
            raise
        if producer.returncode != 0:
            raise RuntimeError(f"the producer failed: {_stderr(producer)}")
        asyncio.run(_wait_empty(_db_url(db, None), 15.0))
    finally:
        starts = dict(_stop_workers(workers))
    recs = [(int(s), float(c), float(t)) for s, c, t in json.loads(commits_out.read_text())]
    pickups = [(starts[s] - t) * 1000 for s, _, t in recs if s in starts]
    inserts = [(t - c) * 1000 for _, c, t in recs]
    return {
        "rate": rate,
        "offered": len(recs),
        "offered_per_s": round(len(recs) / seconds),
        "picked_up": len(pickups),
        "p50_ms": round(percentile(pickups, 0.50), 2),
        "p99_ms": round(percentile(pickups, 0.99), 2),
        # the producer's insert() call, from the call to hearing the commit
        "insert_p50_ms": round(percentile(inserts, 0.50), 2),
        "insert_p99_ms": round(percentile(inserts, 0.99), 2),
    }


def _query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _leader_pid(url: str) -> int | None:
    rows = _query(
        url,
        "SELECT holder FROM awa.leader_leases"
        " WHERE name = 'maintenance' AND expires_at > clock_timestamp()",
    )
    return int(str(rows[0][0]).split("/")[-2]) if rows else None


def _poll(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not within {timeout} s")


def failover(admin: str, hosts: int, tmp: Path, settle: float) -> dict[str, Any]:
    """SIGKILL the leader's host: how long until another host leads, whether every
    one-second cron slot fired exactly once across it, and how long until the dead host's
    running job is rescued and running on another host."""
    db = f"fleet_failover_{hosts}"
    fresh(admin, db)
    url = _db_url(db, None)
    asyncio.run(enqueue_backlog(url, 0))
    workers = _start_workers(db, hosts, tmp, "--failover")
    try:

        async def hold_jobs() -> None:
            async with awa.AsyncClient(url, max_connections=2) as client:
                for n in range(hosts):
                    await client.insert(Hold(n), queue=HOLD_QUEUE)

        asyncio.run(hold_jobs())
        leader = _poll("a first leader", lambda: _leader_pid(url), 60)
        _poll(
            "every hold job running",
            lambda: _query(
                url, "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'running'",
                HOLD_QUEUE,
            )[0][0] == hosts,
            60,
        )  # fmt: skip
        time.sleep(settle)  # cron fires under the first leader
        host = next(i for i, (p, _) in enumerate(workers, 1) if p.pid == leader)
        victim = workers[host - 1][0]
        victim.kill()
        killed_at = time.monotonic()
        victim.wait()
        new_leader = _poll(
            "a new leader", lambda: (p := _leader_pid(url)) is not None and p != leader and p, 60
        )
        took_over = time.monotonic() - killed_at
        _poll(
            "the dead host's job rescued",
            lambda: _query(
                url,
                "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'running'"
                " AND attempt > 1",
                HOLD_QUEUE,
            )[0][0] >= 1,
            60,
        )  # fmt: skip
        rescued = time.monotonic() - killed_at
        time.sleep(settle)  # cron fires under the new leader
        fires = [
            datetime.fromisoformat(str(row[0]))
            for row in _query(
                url,
                "SELECT metadata->>'cron_fire_time' FROM awa.jobs"
                " WHERE metadata->>'cron_name' = %s",
                CRON_NAME,
            )
        ]
    finally:
        _stop_workers(workers)
    seconds = sorted({int(f.timestamp()) for f in fires})
    duplicates = len(fires) - len(seconds)
    missed = sum(b - a - 1 for a, b in itertools.pairwise(seconds))
    return {
        "hosts": hosts,
        "new_leader_after_s": round(took_over, 2),
        "new_leader_host": next(i for i, (p, _) in enumerate(workers, 1) if p.pid == new_leader),
        "rescued_after_s": round(rescued, 2),
        "cron_fires": len(fires),
        "cron_duplicates": duplicates,
        "cron_missed": missed,
    }


def peers_harness(
    harness: Path, venv: Path, out: Path, rtt: float, args: Any, tag: str = ""
) -> None:
    """The shared harness inside host 1: every system crosses the same link."""
    python = Path(os.environ.get("AWA_FLEET_HARNESS_PYTHON", "/tmp/bench-venvs/harness/bin/python"))
    cmd = [
        "ip", "netns", "exec", _ns(1), str(python), str(harness / "bench.py"),
        "--systems", args.peer_systems, "--venv", f"awa-py={venv}",
        "--host", _root_ip(1), "--port", str(RELAY_PORT),
        "--workloads", args.harness_workloads, "--rates", args.rates,
        "--drain-n", str(args.jobs), "--latency-duration", str(args.seconds),
        "--out", str(out / f"harness-rtt{rtt:g}{tag}"), "--run-id", f"fleet-rtt{rtt:g}{tag}",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(
        f"  harness at rtt {rtt:g} ms{tag} ({venv}, load {_load()}): exit {done.returncode}; "
        f"report in {out}/harness-rtt{rtt:g}{tag}",
        flush=True,
    )
    if done.returncode != 0:
        print(done.stderr[-2000:])
    for line in harness_latency(out / f"harness-rtt{rtt:g}{tag}", f"fleet-rtt{rtt:g}{tag}"):
        print(f"    {line}", flush=True)


def harness_latency(report_dir: Path, run_id: str) -> list[str]:
    """Each system's latency rows of a harness run, with the producer's insert call (call to
    hearing the commit, from the producer's records the harness leaves in
    ``/tmp/bench-<run id>``) beside pickup (commit heard to handler start) and e2e (call to
    handler return): where a pickup measured from the commit starts."""
    runs = sorted(report_dir.glob(f"run-{run_id}*.json"))
    if not runs:
        return ["no harness report"]
    lines = []
    systems = json.loads(runs[-1].read_text()).get("systems", {})
    for system, workloads in systems.items():
        for key, got in workloads.items():
            if not key.startswith("latency@") or "pickup_ms" not in got:
                continue
            rate = key.partition("@")[2]
            records = Path("/tmp") / f"bench-{run_id}" / f"{system}-{rate}-producer.json"
            inserts = (
                [(t_commit - t_call) * 1000 for _, _, t_call, t_commit in json.loads(
                    records.read_text())["recs"]]
                if records.exists()
                else []
            )  # fmt: skip
            pickup, e2e = got["pickup_ms"], got["e2e_ms"]
            lines.append(
                f"{system:9s} @{rate}/s ({got['achieved_enqueue_rate']:.0f}/s enqueued): "
                f"insert p50 / p99 {percentile(inserts, 0.5):.1f} / "
                f"{percentile(inserts, 0.99):.1f} ms, pickup {pickup['p50']:.1f} / "
                f"{pickup['p99']:.1f}, e2e {e2e['p50']:.1f} / {e2e['p99']:.1f}"
            )
    return lines


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("worker")
    w.add_argument("--url", required=True)
    w.add_argument("--slots", type=int, default=64)
    w.add_argument("--batch", type=int, default=512)
    w.add_argument("--starts-out", required=True)
    w.add_argument("--failover", action="store_true")
    pr = sub.add_parser("produce")
    pr.add_argument("--url", required=True)
    pr.add_argument("--rate", type=float, required=True)
    pr.add_argument("--seconds", type=float, required=True)
    pr.add_argument("--inflight", type=int, default=8)
    pr.add_argument("--out", required=True)
    rl = sub.add_parser("relay")
    rl.add_argument("--listen", required=True)
    rl.add_argument("--to", required=True)
    rl.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--server", default="127.0.0.1:5432", help="the Postgres server (host:port)")
    p.add_argument("--rtt", default="0,1,5,20", help="round trips in ms")
    p.add_argument("--hosts", default="1,4", help="worker host counts")
    p.add_argument("--workloads", default="drain,latency,failover")
    p.add_argument("--settle", type=float, default=8.0, help="failover: seconds of cron per leader")
    p.add_argument("--jobs", type=int, default=30_000)
    p.add_argument("--rates", default="200,1000")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--peers-harness", type=Path, default=None)
    p.add_argument("--peer-systems", default="awa-py,awa-pg,pgqueuer")
    p.add_argument("--harness-workloads", default="drain,latency")
    p.add_argument(
        "--awa-venvs",
        default=None,
        help="venvs to run awa-py from in the harness, comma-separated, one after the other "
        "at each round trip, in reverse order on every other repeat (default: this one)",
    )
    p.add_argument("--repeat", type=int, default=1, help="harness runs per round trip and venv")
    p.add_argument("--out", type=Path, default=Path("/tmp/awa-fleet"))
    args = p.parse_args()
    if args.command == "worker":
        asyncio.run(
            _worker(args.url, args.slots, args.batch, args.starts_out, failover=args.failover)
        )
        return
    if args.command == "relay":
        asyncio.run(_relay(args.listen.split(","), args.to, args.delay_ms))
        return
    if args.command == "produce":
        asyncio.run(_producer(args.url, args.rate, args.seconds, args.inflight, args.out))
        return
    if os.geteuid() != 0:
        raise SystemExit("the fleet needs root: ip netns, veth and tc")
    host, port = args.server.rsplit(":", 1)
    _SERVER[:] = [host, int(port)]
    admin = _db_url("postgres", None)
    rtts = [float(x) for x in args.rtt.split(",")]
    host_counts = [int(x) for x in args.hosts.split(",")]
    workloads = set(args.workloads.split(","))
    most = max(host_counts)
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    try:
        make_links(most)
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            for rtt in rtts:
                with links_with_rtt(most, rtt):
                    seen = measured_rtt_ms(1)
                    print(f"round trip {rtt:g} ms (SELECT 1 median {seen:.2f} ms)", flush=True)
                    for hosts in host_counts:
                        row: dict[str, Any] = {"rtt_ms": rtt, "select1_ms": round(seen, 2)}
                        row["hosts"] = hosts
                        if "drain" in workloads:
                            row["drain"] = drain(admin, hosts, args.jobs, tmp)
                            print(f"  {hosts} host(s) drain: {row['drain']}", flush=True)
                        if "latency" in workloads:
                            row["latency"] = []
                            for rate in (float(r) for r in args.rates.split(",")):
                                got = latency(admin, hosts, rate, args.seconds, tmp)
                                row["latency"].append(got)
                                print(f"  {hosts} host(s) latency: {got}", flush=True)
                        results.append(row)
                    if "failover" in workloads:
                        got = failover(admin, most, tmp, args.settle)
                        results.append({"rtt_ms": rtt, "failover": got})
                        print(f"  {most} host(s) failover: {got}", flush=True)
                    if args.peers_harness is not None:
                        venvs = [Path(v) for v in (args.awa_venvs or sys.prefix).split(",")]
                        for run in range(args.repeat):
                            order = venvs if run % 2 == 0 else venvs[::-1]
                            for venv in order:
                                tag = "" if args.repeat == 1 and len(venvs) == 1 else (
                                    f"-{run + 1}-{venv.parent.name or venv.name}"
                                )  # fmt: skip
                                peers_harness(args.peers_harness, venv, args.out, rtt, args, tag)
    finally:
        remove_links()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.out / f"fleet-{stamp}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
