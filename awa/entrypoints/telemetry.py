"""Metric export: ``init_telemetry`` (OTLP) and the Prometheus text for ``GET /metrics``.

Awa records through ``opentelemetry-api`` (``awa.runtime.metrics``); this module is what
installs an SDK meter provider for it when the application has not installed one, and
attaches readers to it: a periodic OTLP exporter (``init_telemetry``) and a Prometheus
reader (the health listener). Both need the ``otel`` extra.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from awa.domain.errors import AwaError

log = logging.getLogger("awa.telemetry")

EXTRA_HINT = "install the OpenTelemetry extra: pip install 'awa-py[otel]'"

_lock = threading.Lock()
_otlp_reader: Any = None
_prometheus_reader: Any = None


class TelemetryUnavailable(AwaError):
    """The OpenTelemetry SDK or an exporter this call needs is not installed."""


def _provider(service_name: str | None) -> Any:
    """The global SDK meter provider, installing one when none is set yet."""
    try:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    except ImportError as exc:
        raise TelemetryUnavailable(
            f"OpenTelemetry SDK not available ({exc}): {EXTRA_HINT}"
        ) from exc
    current = metrics.get_meter_provider()
    if isinstance(current, MeterProvider):
        return current
    attributes = {SERVICE_NAME: service_name} if service_name else {}
    provider = MeterProvider(resource=Resource.create(attributes))
    metrics.set_meter_provider(provider)
    installed = metrics.get_meter_provider()
    if installed is not provider:
        # Another kind of provider was installed first; readers cannot be attached to it.
        raise TelemetryUnavailable(
            f"the global meter provider is a {type(installed).__name__}, not the SDK's "
            "MeterProvider: attach your own exporter to it instead"
        )
    return provider


def init_telemetry(endpoint: str, service_name: str, export_interval_ms: int = 5000) -> bool:
    """Export awa's metrics over OTLP/gRPC to ``endpoint`` every ``export_interval_ms``.

    Returns ``True`` when the exporter was installed, ``False`` when one already is (the
    call is then a no-op). ``service_name`` becomes the ``service.name`` resource
    attribute when this call installs the meter provider. Needs the ``otel`` extra."""
    global _otlp_reader
    if not isinstance(endpoint, str) or not endpoint:
        raise ValueError("endpoint must be a non-empty string, e.g. 'http://localhost:4317'")
    if not isinstance(service_name, str) or not service_name:
        raise ValueError("service_name must be a non-empty string")
    if isinstance(export_interval_ms, bool) or not isinstance(export_interval_ms, int):
        raise TypeError("export_interval_ms must be an integer")
    if export_interval_ms <= 0:
        raise ValueError(f"export_interval_ms must be > 0, got {export_interval_ms}")
    with _lock:
        if _otlp_reader is not None:
            return False
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        except ImportError as exc:
            raise TelemetryUnavailable(
                f"OTLP exporter not available ({exc}): {EXTRA_HINT}"
            ) from exc
        if "://" not in endpoint:
            raise ValueError(f"endpoint {endpoint!r} must be a URL such as http://localhost:4317")
        exporter = OTLPMetricExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        reader = PeriodicExportingMetricReader(
            exporter, export_interval_millis=float(export_interval_ms)
        )
        _provider(service_name).add_metric_reader(reader)
        _otlp_reader = reader
        log.info("exporting metrics to %s every %d ms", endpoint, export_interval_ms)
        return True


def shutdown_telemetry() -> None:
    """Flush the OTLP exporter installed by :func:`init_telemetry` and remove it (a later
    ``init_telemetry`` installs a new one). A no-op when none is installed."""
    global _otlp_reader
    with _lock:
        reader, _otlp_reader = _otlp_reader, None
    if reader is None:
        return
    try:
        from opentelemetry import metrics

        reader.force_flush()
        provider = metrics.get_meter_provider()
        remove = getattr(provider, "remove_metric_reader", None)
        if callable(remove):
            remove(reader)
        reader.shutdown()
    except Exception:
        log.warning("flushing the OTLP metric exporter failed", exc_info=True)


def enable_prometheus() -> None:
    """Attach a Prometheus reader to the global meter provider (once per process)."""
    global _prometheus_reader
    with _lock:
        if _prometheus_reader is not None:
            return
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
        except ImportError as exc:
            raise TelemetryUnavailable(
                f"Prometheus exporter not available ({exc}): {EXTRA_HINT}"
            ) from exc
        reader = PrometheusMetricReader()
        _provider(None).add_metric_reader(reader)
        _prometheus_reader = reader


def prometheus_text() -> tuple[bytes, str]:
    """The current metrics in Prometheus text format, with their content type."""
    enable_prometheus()
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
