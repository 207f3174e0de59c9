"""``init_telemetry`` / ``shutdown_telemetry`` as awa-pg has them: one exporter at a time,
a second call is a no-op returning False, shutdown flushes what was recorded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import awa

# Run in a fresh interpreter: the global meter provider can be installed once.
SCRIPT = """
import awa
from opentelemetry.sdk.metrics.export import MetricExportResult
from awa.entrypoints import telemetry
from awa.runtime import metrics

exported = []

def capture(data, **kwargs):
    for rm in data.resource_metrics:
        service = rm.resource.attributes.get("service.name")
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                exported.append((service, m.name))
    return MetricExportResult.SUCCESS

assert awa.init_telemetry("http://127.0.0.1:9", "billing", export_interval_ms=3_600_000)
assert awa.init_telemetry("http://127.0.0.1:9", "billing") is False
telemetry._otlp_reader._exporter.export = capture
metrics.instruments().job_outcome("completed", "send_email", "default", 0.01)
awa.shutdown_telemetry()
assert ("billing", "awa.job.completed") in exported, exported
assert ("billing", "awa.job.duration") in exported, exported
awa.shutdown_telemetry()  # nothing installed: a no-op
assert awa.init_telemetry("http://127.0.0.1:9", "billing") is True
awa.shutdown_telemetry()
print("ok")
"""


def test_init_once_and_shutdown_flushes() -> None:
    # The last shutdown flushes to a collector that does not answer: the exporter's own
    # timeout (the standard variable, 10 s by default) bounds how long it keeps trying.
    env = {**os.environ, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("", "svc"), ValueError),
        (("http://x:1", ""), ValueError),
        (("http://x:1", "svc", 0), ValueError),
        (("http://x:1", "svc", "5"), TypeError),
        (("localhost:4317", "svc"), ValueError),
    ],
)
def test_bad_arguments_are_refused(args: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        awa.init_telemetry(*args)  # type: ignore[arg-type]
