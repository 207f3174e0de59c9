"""CPU the telemetry adds per job, measured on the recording path itself.

A drain's wall-clock rate on a shared host moves by more than the effect being measured,
so this isolates what a job costs the worker in outcome handling and claim accounting:
``AttemptObserver.finished`` for every job plus ``Instruments.claimed`` per claim of 512,
once with OpenTelemetry absent (the no-op path) and once with the SDK meter provider and
the Prometheus reader the health listener attaches. Best of ``--repeat`` runs.

    .venv/bin/python -m benchmarks.telemetry_overhead --jobs 200000
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from awa.adapters.clock import SystemClock
from awa.domain.job import Claim, JobRecord, RunLease
from awa.domain.outcomes import Complete
from awa.domain.states import JobState
from awa.runtime import AttemptContext, HandlerRegistry
from awa.runtime.metrics import Instruments
from awa.runtime.observer import AttemptObserver

BATCH = 512


def _contexts(count: int) -> list[AttemptContext]:
    now = datetime.now(UTC)
    contexts = []
    for i in range(count):
        record = JobRecord(
            id=i,
            kind="bench_noop",
            queue="bench",
            args={},
            state=JobState.Running,
            priority=2,
            attempt=1,
            max_attempts=25,
            run_at=now,
            created_at=now,
        )
        claim = Claim(job=record, lease=RunLease(i, 1), deadline_at=None)
        contexts.append(AttemptContext(None, claim, queue="bench", clock=SystemClock()))  # type: ignore[arg-type]
    return contexts


def _run(observer: AttemptObserver, instruments: Instruments | None, jobs: int) -> float:
    contexts = _contexts(BATCH)
    outcome = Complete()
    started = time.process_time()
    done = 0
    while done < jobs:
        if instruments is not None:
            instruments.claimed(
                "bench",
                [(c.record.kind, None) for c in contexts],
                BATCH,
                0.001,
                [c.record.run_at for c in contexts],
                datetime.now(UTC),
            )
        for context in contexts:
            if observer.tracing and observer.traced(context):
                with observer.execution_span(context):
                    pass
            observer.finished(context, outcome, 0.0001)
        done += BATCH
    return 1e6 * (time.process_time() - started) / done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    handlers = HandlerRegistry()
    handlers.register("bench_noop", lambda ctx: None)

    absent = AttemptObserver(handlers)
    absent._instruments = None
    absent.tracing = False

    from awa.entrypoints import telemetry
    from awa.runtime import metrics

    telemetry.enable_prometheus()
    instruments = metrics.instruments()
    present = AttemptObserver(handlers)
    results: dict[str, list[float]] = {"absent": [], "sdk + prometheus reader": []}
    for _ in range(a.repeat):
        results["absent"].append(_run(absent, None, a.jobs))
        results["sdk + prometheus reader"].append(_run(present, instruments, a.jobs))
    for label, values in results.items():
        print(f"{label}: {min(values):.2f} us/job (best of {a.repeat})", flush=True)
    scrape: list[float] = []
    for _ in range(a.repeat):
        started = time.process_time()
        telemetry.prometheus_text()
        scrape.append(1e3 * (time.process_time() - started))
    print(f"one /metrics scrape: {min(scrape):.2f} ms CPU", flush=True)


if __name__ == "__main__":
    main()
