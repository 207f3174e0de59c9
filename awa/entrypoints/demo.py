"""A self-contained tour of the job lifecycle on the in-memory engine.

Enqueues a handful of jobs of several kinds, then plays a single worker against them on a
manual clock: claims in priority order, completes, retries with backoff, snoozes, exhausts
attempts and fails, promotes scheduled work when it comes due, and prints every step and
the final per-queue counts. Run it with ``scripts/demo`` or ``python -m awa.entrypoints.demo``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import timedelta

import anyio

from awa.adapters.clock import ManualClock
from awa.adapters.inmemory import InMemoryEngine
from awa.domain import Backoff, Claim, JobRecord, JobSpec, JobState, validate_spec
from awa.domain.outcomes import Complete, FailOutcome, Outcome, RetryWithBackoff, SnoozeOutcome
from awa.ports import Ack, JobFilter, StorageEngine

Handler = Callable[[JobRecord], Outcome]
Emit = Callable[[str], None]

QUEUES = ("email", "media", "billing")
TICK = timedelta(seconds=1)
MAX_TICKS = 600


def send_email(job: JobRecord) -> Outcome:
    return Complete()


def resize_image(job: JobRecord) -> Outcome:
    return Complete()


def charge_card(job: JobRecord) -> Outcome:
    # The payment gateway times out on the first attempt, then accepts.
    if job.attempt == 1:
        return RetryWithBackoff(error="gateway timeout")
    return Complete()


def sync_inventory(job: JobRecord) -> Outcome:
    # The upstream system is down for the whole demo: every attempt fails.
    return RetryWithBackoff(error="upstream unavailable")


def generate_report(job: JobRecord) -> Outcome:
    # The data is not ready on the first run; come back later without spending an attempt.
    if not job.metadata.get("snoozes"):
        return SnoozeOutcome(delay=timedelta(seconds=5))
    return Complete()


def import_feed(job: JobRecord) -> Outcome:
    return FailOutcome(error="feed format not supported")


HANDLERS: dict[str, Handler] = {
    "send_email": send_email,
    "resize_image": resize_image,
    "charge_card": charge_card,
    "sync_inventory": sync_inventory,
    "generate_report": generate_report,
    "import_feed": import_feed,
}


def demo_jobs(clock: ManualClock) -> list[JobSpec]:
    now = clock.now()
    return [
        JobSpec(kind="send_email", queue="email", args={"to": "ada@example.com"}),
        JobSpec(kind="send_email", queue="email", args={"to": "alan@example.com"}),
        JobSpec(kind="resize_image", queue="media", args={"image": "cat.png"}, priority=3),
        JobSpec(kind="resize_image", queue="media", args={"image": "hero.png"}, priority=1),
        JobSpec(kind="charge_card", queue="billing", args={"order": 1001, "cents": 4200}),
        JobSpec(kind="sync_inventory", queue="billing", args={"sku": "A-1"}, max_attempts=3),
        JobSpec(
            kind="generate_report",
            queue="media",
            args={"month": "2030-01"},
            run_at=now + timedelta(seconds=10),
        ),
        JobSpec(kind="import_feed", queue="email", args={"url": "https://example.com/feed"}),
    ]


class Demo:
    """One worker driving a storage engine through the port, narrating as it goes."""

    def __init__(self, engine: StorageEngine, clock: ManualClock, emit: Emit) -> None:
        self.engine = engine
        self.clock = clock
        self.emit = emit
        self.start = clock.now()

    def say(self, message: str) -> None:
        elapsed = int((self.clock.now() - self.start).total_seconds())
        self.emit(f"[t+{elapsed:>3}s] {message}")

    async def enqueue(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        jobs = await self.engine.enqueue_many([validate_spec(spec) for spec in specs])
        for job in jobs:
            when = "" if job.state == JobState.Available else f", runs at t+{self._at(job)}s"
            self.say(
                f"enqueued #{job.id} {job.kind} on {job.queue} "
                f"(priority {job.priority}, {job.state}{when})"
            )
        return jobs

    def _at(self, job: JobRecord) -> int:
        return int((job.run_at - self.start).total_seconds())

    async def run_claim(self, claim: Claim) -> None:
        job = claim.job
        self.say(f"claimed  #{job.id} {job.kind} (attempt {job.attempt}/{job.max_attempts})")
        outcome = HANDLERS[job.kind](job)
        lease = claim.lease
        if isinstance(outcome, Complete):
            [ack] = await self.engine.complete([lease])
            self._report(ack, f"completed #{job.id} {job.kind}")
        elif isinstance(outcome, RetryWithBackoff):
            ack = await self.engine.retry(lease, error=outcome.error)
            after = await self.engine.get_job(job.id)
            assert after is not None
            if after.state == JobState.Failed:
                self._report(ack, f"failed   #{job.id} {job.kind}: {outcome.error} (exhausted)")
            else:
                self._report(
                    ack,
                    f"retry    #{job.id} {job.kind}: {outcome.error}; "
                    f"next attempt at t+{self._at(after)}s",
                )
        elif isinstance(outcome, SnoozeOutcome):
            # Count snoozes in the job's metadata so the handler sees them next time.
            snoozes = int(job.metadata.get("snoozes", 0)) + 1
            await self.engine.update_progress(
                lease, progress=job.progress, metadata_updates={"snoozes": snoozes}
            )
            ack = await self.engine.snooze(lease, delay=outcome.delay)
            seconds = int(outcome.delay.total_seconds())
            self._report(ack, f"snoozed  #{job.id} {job.kind} for {seconds}s (no attempt spent)")
        elif isinstance(outcome, FailOutcome):
            ack = await self.engine.fail(lease, error=outcome.error)
            self._report(ack, f"failed   #{job.id} {job.kind}: {outcome.error} (terminal)")
        else:
            raise TypeError(f"the demo does not handle {type(outcome).__name__}")

    def _report(self, ack: Ack, message: str) -> None:
        self.say(message if ack is Ack.APPLIED else f"{message} [stale, ignored]")

    async def work(self) -> None:
        """Claim and run until nothing is pending, moving the clock while idle."""
        for _ in range(MAX_TICKS):
            promoted = await self.engine.promote_due()
            if promoted:
                self.say(f"promoted {promoted} due job(s) to available")
            ran = 0
            for queue in QUEUES:
                for claim in await self.engine.claim(queue, limit=10):
                    await self.run_claim(claim)
                    ran += 1
            if not ran and not await self._pending():
                return
            if not ran:
                self.clock.advance(TICK)
        raise RuntimeError("the demo did not finish in time")

    async def _pending(self) -> int:
        total = 0
        for counts in await self.engine.queue_counts():
            total += counts.total_queued + counts.count(JobState.Running)
        return total

    async def summary(self) -> None:
        self.emit("")
        self.emit(f"{'queue':<10}{'completed':>10}{'failed':>8}{'queued':>8}")
        for counts in await self.engine.queue_counts():
            self.emit(
                f"{counts.queue:<10}{counts.count(JobState.Completed):>10}"
                f"{counts.count(JobState.Failed):>8}{counts.total_queued:>8}"
            )
        failed = [
            job
            for queue in QUEUES
            for job in await self._jobs(queue)
            if job.state == JobState.Failed
        ]
        for job in failed:
            last = job.errors[-1]["error"] if job.errors else "?"
            self.emit(f"failed job #{job.id} {job.kind}: {len(job.errors)} error(s), last: {last}")

    async def _jobs(self, queue: str) -> list[JobRecord]:
        return await self.engine.list_jobs(JobFilter(queue=queue))


async def run_demo(emit: Emit = print) -> StorageEngine:
    """Run the whole demo on a fresh in-memory engine; returns the engine for inspection."""
    clock = ManualClock()
    engine = InMemoryEngine(clock=clock, backoff=Backoff(jitter=lambda: 0.0))
    demo = Demo(engine, clock, emit)
    emit("Awa demo: one worker, three queues, the in-memory engine and a manual clock.")
    emit("")
    await demo.enqueue(demo_jobs(clock))
    await demo.work()
    await demo.summary()
    return engine


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print("usage: python -m awa.entrypoints.demo", file=sys.stderr)
        return 2
    anyio.run(run_demo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
