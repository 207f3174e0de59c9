"""The one switch for admin features that depend on client methods a build may lack.

Cron schedules, batch operations and descriptors are served through the client methods
named here. Each endpoint calls :func:`client_method`, so a client without the method
makes the endpoint answer 501 with a JSON error and ``/api/capabilities`` reports the
feature as unavailable; a client that has it serves it with no change here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: feature -> the client methods it needs (all of them).
FEATURES: dict[str, tuple[str, ...]] = {
    "cron": ("list_cron_jobs",),
    "cron_control": ("trigger_cron_job", "pause_cron_job", "resume_cron_job"),
    "batch_operations": (
        "preview_batch_operation",
        "submit_batch_operation",
        "list_batch_operations",
        "get_batch_operation",
        "cancel_batch_operation",
    ),
    "descriptors": ("list_queue_descriptors", "list_job_kind_descriptors"),
}

_FEATURE_OF = {name: feature for feature, names in FEATURES.items() for name in names}


class FeatureUnavailable(Exception):
    """The client has no method for this feature (answered as HTTP 501)."""

    def __init__(self, feature: str, method: str) -> None:
        super().__init__(f"{feature} is not available: this client has no {method}()")
        self.feature = feature
        self.method = method


def available(client: object) -> dict[str, bool]:
    """Which features this client supports."""
    return {
        feature: all(callable(getattr(client, name, None)) for name in names)
        for feature, names in FEATURES.items()
    }


def client_method(client: object, name: str) -> Callable[..., Any]:
    """The client's bound method ``name``; :class:`FeatureUnavailable` when it has none."""
    feature = _FEATURE_OF[name]
    method = getattr(client, name, None)
    if not callable(method):
        raise FeatureUnavailable(feature, name)
    return method  # type: ignore[no-any-return]
