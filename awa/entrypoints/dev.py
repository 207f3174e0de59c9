"""``awa dev``: a real worker on Postgres, end to end, with a live progress display.

Without a database URL it starts an embedded Postgres (the ``pgserver`` package) in a data
directory under the user's cache directory (a temporary directory when running as root,
because the embedded server would otherwise loosen permissions on root's home), creates a
throw-away database in it, migrates, enqueues example jobs of several kinds, runs one
worker runtime against them, shows counts by state while they run, prints a per-kind
summary once every job has settled, and shuts everything down (the server included),
also when stopped by SIGINT, SIGTERM or SIGHUP (see :mod:`awa.entrypoints.dev_embedded`).

With a database URL it uses that database instead; the run's queues get a unique prefix
so concurrent runs and existing queues are left alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from awa.domain.errors import TerminalError
from awa.domain.handler_results import RetryAfter, Snooze
from awa.entrypoints.bootstrap import migrate
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.dev_embedded import (
    default_data_dir,
    embedded_postgres,
    stop_on_signals,
)
from awa.entrypoints.job import Job

#: Display order of job states in the live progress line.
STATES = (
    "scheduled",
    "available",
    "running",
    "retryable",
    "waiting_external",
    "completed",
    "failed",
)
#: States of a job that has not settled yet.
PENDING_STATES = ("scheduled", "available", "running", "retryable", "waiting_external")

#: Share of the jobs each kind gets, out of 20 (the pattern repeats every 20 jobs).
KIND_PATTERN = (
    ["send_email"] * 8
    + ["resize_image"] * 4
    + ["charge_card"] * 3
    + ["sync_inventory"] * 2
    + ["generate_report"] * 2
    + ["import_feed"]
)


@attrs.frozen
class DevOptions:
    """What ``awa dev`` runs: how many jobs, handler concurrency per queue, a time limit."""

    jobs: int = 300
    workers: int = 8
    seconds: float | None = None
    refresh: float = 0.5


@attrs.define
class KindStats:
    """Final tally for one job kind."""

    kind: str
    queue: str
    jobs: int = 0
    completed: int = 0
    failed: int = 0
    other: int = 0
    retried: int = 0
    snoozed: int = 0
    runs: int = 0


@attrs.frozen
class DevSummary:
    """The outcome of a run: per-kind counts, elapsed wall time, whether it settled."""

    kinds: tuple[KindStats, ...]
    elapsed: float
    settled: bool

    @property
    def total(self) -> int:
        return sum(k.jobs for k in self.kinds)

    @property
    def unfinished(self) -> int:
        return sum(k.other for k in self.kinds)

    def render(self) -> str:
        """The summary table printed at the end of a run."""
        elapsed = max(self.elapsed, 1e-9)
        lines = [
            "",
            f"{'kind':<16} {'queue':<10} {'jobs':>5} {'completed':>9} {'failed':>6} "
            f"{'retried':>7} {'snoozed':>7} {'runs':>5} {'jobs/s':>7}",
        ]
        for k in self.kinds:
            lines.append(
                f"{k.kind:<16} {short_queue(k.queue):<10} {k.jobs:>5} {k.completed:>9} "
                f"{k.failed:>6} {k.retried:>7} {k.snoozed:>7} {k.runs:>5} "
                f"{k.completed / elapsed:>7.1f}"
            )
        completed = sum(k.completed for k in self.kinds)
        failed = sum(k.failed for k in self.kinds)
        lines.append(
            f"{'total':<16} {'':<10} {self.total:>5} {completed:>9} {failed:>6} "
            f"{sum(k.retried for k in self.kinds):>7} {sum(k.snoozed for k in self.kinds):>7} "
            f"{sum(k.runs for k in self.kinds):>5} {completed / elapsed:>7.1f}"
        )
        if self.settled:
            lines.append(
                f"all {self.total} jobs settled in {self.elapsed:.1f}s: "
                f"{completed} completed, {failed} failed"
            )
        else:
            lines.append(
                f"time limit reached after {self.elapsed:.1f}s with "
                f"{self.unfinished} of {self.total} jobs unfinished"
            )
        return "\n".join(lines)


def short_queue(queue: str) -> str:
    """The queue name without the per-run prefix used on a shared database."""
    return queue.rsplit("__", 1)[-1]


# --------------------------------------------------------------------------- handlers


@dataclasses.dataclass
class Email:
    to: str


@dataclasses.dataclass
class Image:
    name: str
    steps: int


@dataclasses.dataclass
class Payment:
    cents: int


@dataclasses.dataclass
class Inventory:
    sku: str


@dataclasses.dataclass
class Report:
    day: int


@dataclasses.dataclass
class Feed:
    url: str


@attrs.define
class Tally:
    """What the handlers did, by kind (the database knows outcomes, not retries).

    Thread-pool handlers update it too, hence the lock.
    """

    runs: Counter[str] = attrs.field(factory=Counter)
    retried: Counter[str] = attrs.field(factory=Counter)
    snoozed: Counter[str] = attrs.field(factory=Counter)
    snoozed_ids: set[int] = attrs.field(factory=set)
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def ran(self, kind: str) -> None:
        with self.lock:
            self.runs[kind] += 1

    def retry(self, kind: str) -> None:
        with self.lock:
            self.retried[kind] += 1


def register_handlers(client: AsyncClient, queue: Callable[[str], str], tally: Tally) -> None:
    """The example handlers: async and thread-pool ones; some sleep, some fail and retry,
    one snoozes, one reports progress, one fails terminally."""

    @client.task(Email, kind="send_email", queue=queue("email"))
    async def send_email(job: Job[Email]) -> None:
        tally.ran("send_email")
        await asyncio.sleep(0.005 + (job.id % 7) * 0.004)

    @client.task(Image, kind="resize_image", queue=queue("media"))
    def resize_image(job: Job[Image]) -> None:
        # A plain function: it runs on the worker's thread pool, so blocking is fine.
        tally.ran("resize_image")
        for step in range(1, job.args.steps + 1):
            time.sleep(0.01)
            job.set_progress(step * 100 // job.args.steps, f"pass {step}/{job.args.steps}")

    @client.task(Payment, kind="charge_card", queue=queue("billing"))
    async def charge_card(job: Job[Payment]) -> None:
        tally.ran("charge_card")
        await asyncio.sleep(0.01)
        if job.attempt == 1 and job.id % 3 == 0:
            # An exception retries with exponential backoff (about 2 s after attempt 1).
            tally.retry("charge_card")
            raise ConnectionError("payment gateway timed out")

    @client.task(Inventory, kind="sync_inventory", queue=queue("billing"))
    async def sync_inventory(job: Job[Inventory]) -> RetryAfter | None:
        tally.ran("sync_inventory")
        if job.attempt <= 2:
            tally.retry("sync_inventory")
            return RetryAfter(0.3)
        return None

    @client.task(Report, kind="generate_report", queue=queue("reports"))
    async def generate_report(job: Job[Report]) -> Snooze | None:
        tally.ran("generate_report")
        if job.id not in tally.snoozed_ids:
            tally.snoozed_ids.add(job.id)
            tally.snoozed["generate_report"] += 1
            return Snooze(0.5)
        await asyncio.sleep(0.02)
        return None

    @client.task(Feed, kind="import_feed", queue=queue("reports"))
    async def import_feed(job: Job[Feed]) -> None:
        tally.ran("import_feed")
        raise TerminalError(f"unsupported feed format: {job.args.url}")


def example_job(kind: str, n: int) -> Any:
    """The arguments of the ``n``-th example job of ``kind``."""
    if kind == "send_email":
        return Email(to=f"user{n}@example.com")
    if kind == "resize_image":
        return Image(name=f"photo-{n}.jpg", steps=4)
    if kind == "charge_card":
        return Payment(cents=100 + n)
    if kind == "sync_inventory":
        return Inventory(sku=f"SKU-{n:05d}")
    if kind == "generate_report":
        return Report(day=n % 28 + 1)
    return Feed(url=f"https://example.com/feed-{n}.xml")


# --------------------------------------------------------------------------- run


async def live_counts(client: AsyncClient, queues: list[str]) -> Counter[str]:
    """Jobs by state across ``queues``, from the client's exact queue statistics (which
    work on every storage engine). Completed means completed within the last hour, which
    covers a whole run."""
    by_state: Counter[str] = Counter()
    for stat in await client.queue_stats():
        if stat.queue not in queues:
            continue
        by_state["scheduled"] += stat.scheduled
        by_state["available"] += stat.available
        by_state["running"] += stat.running
        by_state["retryable"] += stat.retryable
        by_state["waiting_external"] += stat.waiting_external
        by_state["failed"] += stat.failed
        by_state["completed"] += stat.completed_last_hour
    return by_state


async def final_counts(client: AsyncClient, kind: str, queue: str, jobs: int) -> Counter[str]:
    """Exact terminal counts for one kind, read job by job."""
    counts: Counter[str] = Counter()
    for state in ("completed", "failed", "cancelled"):
        found = await client.list_jobs(state=state, kind=kind, queue=queue, limit=jobs)
        counts[state] = len(found)
    return counts


#: Short state labels for a live line that would not fit the terminal with the full ones.
SHORT_STATES = {
    "scheduled": "sched",
    "available": "avail",
    "running": "run",
    "retryable": "retry",
    "waiting_external": "wait",
    "completed": "done",
    "failed": "fail",
}


class Progress:
    """The live display: one line rewritten in place on a TTY, never wider than the
    terminal (it would wrap and stop rewriting in place), and periodic lines otherwise.

    ``columns`` fixes the width; by default the terminal's is read at every update, so a
    resized window is followed."""

    def __init__(self, out: TextIO, *, tty: bool, total: int, columns: int | None = None) -> None:
        self.out = out
        self.tty = tty
        self.total = total
        self.columns = columns
        self._last_line = 0.0
        self._width = 0

    def _columns(self) -> int:
        if self.columns is not None:
            return self.columns
        return shutil.get_terminal_size(fallback=(80, 24)).columns

    def render(self, by_state: Counter[str], elapsed: float, *, width: int | None) -> str:
        """The status line; with ``width``, the longest form that fits in it."""
        done = self.total - sum(by_state[s] for s in PENDING_STATES)
        shown = [s for s in STATES if by_state[s] or s in ("completed", "failed")]
        rate = by_state["completed"] / elapsed if elapsed > 0 else 0.0
        full = (
            f"[{elapsed:5.1f}s] {done}/{self.total} settled | "
            + "  ".join(f"{s} {by_state[s]}" for s in shown)
            + f" | {rate:.0f} completed/s"
        )
        if width is None or len(full) <= width:
            return full
        short = (
            f"{elapsed:.1f}s {done}/{self.total}: "
            + " ".join(f"{SHORT_STATES[s]} {by_state[s]}" for s in shown)
            + f", {rate:.0f}/s"
        )
        if len(short) <= width:
            return short
        return short[: max(0, width - 1)] + "…"

    def update(self, by_state: Counter[str], elapsed: float, *, final: bool = False) -> None:
        if self.tty:
            # One column spare: a line that fills the last column wraps on some terminals.
            line = self.render(by_state, elapsed, width=max(20, self._columns() - 1))
            padding = " " * max(0, self._width - len(line))
            self._width = len(line)
            self.out.write("\r" + line + padding + ("\n" if final else ""))
            self.out.flush()
        elif final or elapsed - self._last_line >= 1.0:
            # Logs and pipes get a line per second instead of a carriage-return animation.
            self._last_line = elapsed
            self.out.write(self.render(by_state, elapsed, width=None) + "\n")
            self.out.flush()


async def run_dev(
    database_url: str, options: DevOptions, out: TextIO, *, tty: bool, shared: bool
) -> DevSummary:
    """Migrate, enqueue, work and report on ``database_url``. ``shared`` databases get
    per-run queue names so other data is never touched."""
    prefix = f"dev_{uuid.uuid4().hex[:8]}__" if shared else ""

    def queue(name: str) -> str:
        return prefix + name

    out.write("migrating the schema...\n")
    await migrate(database_url)
    tally = Tally()
    async with AsyncClient(database_url, max_connections=max(10, options.workers + 4)) as client:
        register_handlers(client, queue, tally)
        kind_queue = {
            "send_email": queue("email"),
            "resize_image": queue("media"),
            "charge_card": queue("billing"),
            "sync_inventory": queue("billing"),
            "generate_report": queue("reports"),
            "import_feed": queue("reports"),
        }
        per_kind: Counter[str] = Counter()
        for n in range(options.jobs):
            per_kind[KIND_PATTERN[n % len(KIND_PATTERN)]] += 1
        for kind, count in per_kind.items():
            await client.insert_many_copy(
                [example_job(kind, n) for n in range(count)],
                kind=kind,
                queue=kind_queue[kind],
                max_attempts=5,
            )
        queues = sorted(set(kind_queue.values()))
        out.write(
            f"enqueued {options.jobs} jobs of {len(per_kind)} kinds on "
            f"{len(queues)} queues; starting a worker with {options.workers} "
            "handlers per queue\n"
        )
        out.flush()
        started = time.monotonic()
        await client.start([(q, options.workers) for q in queues], poll_interval_ms=100)
        progress = Progress(out, tty=tty, total=options.jobs)
        settled = False
        try:
            while True:
                by_state = await live_counts(client, queues)
                elapsed = time.monotonic() - started
                # Every job was enqueued before the worker started, so nothing pending
                # means everything settled.
                settled = not any(by_state[s] for s in PENDING_STATES)
                limit_hit = options.seconds is not None and elapsed >= options.seconds
                progress.update(by_state, elapsed, final=settled or limit_hit)
                if settled or limit_hit:
                    break
                await asyncio.sleep(options.refresh)
        finally:
            await client.shutdown(timeout_ms=2000)
        elapsed = time.monotonic() - started

        kinds = []
        for kind in sorted(per_kind, key=lambda k: -per_kind[k]):
            stats = KindStats(kind=kind, queue=kind_queue[kind], jobs=per_kind[kind])
            counts = await final_counts(client, kind, kind_queue[kind], per_kind[kind])
            stats.completed = counts["completed"]
            stats.failed = counts["failed"]
            stats.other = stats.jobs - stats.completed - stats.failed - counts["cancelled"]
            stats.retried = tally.retried[kind]
            stats.snoozed = tally.snoozed[kind]
            stats.runs = tally.runs[kind]
            kinds.append(stats)
    return DevSummary(kinds=tuple(kinds), elapsed=elapsed, settled=settled)


def main(
    database_url: str | None,
    options: DevOptions,
    *,
    data_dir: Path | None = None,
    out: TextIO | None = None,
    tty: bool | None = None,
) -> int:
    """Run the whole tour; returns the exit code (0 once every job settled in time)."""
    stream = out if out is not None else sys.stdout
    is_tty = stream.isatty() if tty is None else tty
    # SIGINT, SIGTERM and SIGHUP unwind through the worker's shutdown and the embedded
    # server's stop (``Interrupted``); the CLI turns that into exit status 128 + signal.
    with stop_on_signals():
        if database_url:
            summary = asyncio.run(run_dev(database_url, options, stream, tty=is_tty, shared=True))
        else:
            with embedded_postgres(data_dir or default_data_dir(), stream) as url:
                summary = asyncio.run(run_dev(url, options, stream, tty=is_tty, shared=False))
    stream.write(summary.render() + "\n")
    stream.flush()
    return 0 if summary.settled else 1
