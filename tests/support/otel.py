"""Recording Awa's metrics with the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from awa.runtime import metrics

Attributes = frozenset[tuple[str, Any]]


class Recorder:
    """What one in-memory reader collected, by metric name."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def points(self, name: str) -> dict[Attributes, float]:
        """Each data point of ``name`` (counters and gauges): attributes -> value."""
        data = self.reader.get_metrics_data()
        found: dict[Attributes, float] = {}
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        found[frozenset((point.attributes or {}).items())] = point.value
        return found

    def total(self, name: str, attributes: dict[str, Any] | None = None) -> float:
        """The sum of the points of ``name`` whose attributes include ``attributes``."""
        wanted = set((attributes or {}).items())
        return sum(value for key, value in self.points(name).items() if wanted <= key)


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Route the process's Awa instruments to a fresh SDK provider with an in-memory
    reader. Components take the instruments when they are built: build them inside."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    saved = metrics._instruments
    metrics._instruments = metrics.Instruments(provider.get_meter(metrics.METER_NAME))
    try:
        yield Recorder(reader)
    finally:
        metrics._instruments = saved
        provider.shutdown()
